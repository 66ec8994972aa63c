// A "select all" box for a list of checkboxes, and a live count of what is chosen.
// <input type="checkbox" data-select-all="operations"> ticks or clears every
// input[name=operations] in the same form; [data-selected-count="operations"] shows how many
// are ticked. Without JavaScript the page still works: each row is ticked by hand.
(function () {
  "use strict";

  // form.elements: also the boxes that sit outside the form and name it (form="...").
  function boxes(form, name) {
    return Array.prototype.filter.call(form.elements, function (el) {
      return el.type === "checkbox" && el.name === name;
    });
  }

  function refresh(form, name) {
    var all = boxes(form, name);
    var ticked = all.filter(function (box) { return box.checked; }).length;
    document.querySelectorAll('[data-select-all="' + name + '"]').forEach(function (master) {
      if (master.form !== form) { return; }
      master.checked = all.length > 0 && ticked === all.length;
      master.indeterminate = ticked > 0 && ticked < all.length;
    });
    form.querySelectorAll('[data-selected-count="' + name + '"]').forEach(function (out) {
      out.textContent = ticked + " of " + all.length + " chosen";
    });
  }

  document.querySelectorAll("[data-select-all]").forEach(function (master) {
    var form = master.form;
    var name = master.getAttribute("data-select-all");
    if (!form) { return; }
    master.hidden = false;
    master.addEventListener("change", function () {
      boxes(form, name).forEach(function (box) { box.checked = master.checked; });
      refresh(form, name);
    });
    document.addEventListener("change", function (event) {
      if (event.target.form === form && event.target.name === name) { refresh(form, name); }
    });
    refresh(form, name);
  });
})();
