// A refused form comes back open with its message (or its first field) marked data-focus. The
// answer's address names the card acted in (#actions, #op-...): a browser runs no autofocus on
// such an address, and Chromium clears the focus when it scrolls to the fragment at load. So
// the focus is moved once the page has loaded and scrolled.
window.addEventListener("load", () => {
  const target = document.querySelector("[data-focus]");
  if (target) requestAnimationFrame(() => target.focus());
});
