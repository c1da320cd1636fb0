// Behaviour every page shares, kept out of the markup (no inline handlers, for the CSP):
// forms marked data-confirm ask before they submit; [data-toggle] buttons show and hide a panel.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var message = event.target.getAttribute && event.target.getAttribute("data-confirm");
    if (message && !window.confirm(message)) { event.preventDefault(); }
  });
  document.querySelectorAll("[data-toggle]").forEach(function (button) {
    var panel = document.getElementById(button.getAttribute("data-toggle"));
    if (!panel) { return; }
    button.setAttribute("aria-controls", panel.id);
    button.setAttribute("aria-expanded", String(!panel.hidden));
    button.addEventListener("click", function () {
      panel.hidden = !panel.hidden;
      button.setAttribute("aria-expanded", String(!panel.hidden));
    });
  });
})();
