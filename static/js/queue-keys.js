// Keyboard for the queue: j/k move between rows, Enter opens the current row, x ticks it.
// Only while no field has the focus (typing a reason must not move the list). Without
// JavaScript every row is still a link and every action a button, reachable with Tab.
(function () {
  "use strict";
  var rows = Array.prototype.slice.call(document.querySelectorAll("tr[data-row]"));
  if (!rows.length) { return; }
  var current = -1;

  function typing(target) {
    var tag = target && target.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (target && target.isContentEditable);
  }

  function move(index) {
    if (index < 0 || index >= rows.length) { return; }
    if (current >= 0) { rows[current].classList.remove("current"); }
    current = index;
    var row = rows[current];
    row.classList.add("current");
    var link = row.querySelector("a.ref");
    if (link) { link.focus(); }
  }

  rows.forEach(function (row, index) {
    row.addEventListener("focusin", function () {
      if (current !== index) {
        if (current >= 0) { rows[current].classList.remove("current"); }
        current = index;
        row.classList.add("current");
      }
    });
  });

  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey || typing(event.target)) { return; }
    if (event.key === "j") { event.preventDefault(); move(current + 1); }
    else if (event.key === "k") { event.preventDefault(); move(current < 0 ? 0 : current - 1); }
    else if (event.key === "x" && current >= 0) {
      var box = rows[current].querySelector('input[type="checkbox"]');
      if (box) {
        event.preventDefault();
        box.checked = !box.checked;
        box.dispatchEvent(new Event("change", { bubbles: true }));
      }
    } else if (event.key === "Enter" && current >= 0 && event.target === document.body) {
      var link = rows[current].querySelector("a.ref");
      if (link) { event.preventDefault(); link.click(); }
    }
  });
})();
