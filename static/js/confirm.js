// Forms marked data-confirm="question" ask before they submit (instead of inline onsubmit
// handlers, which the Content-Security-Policy forbids).
document.querySelectorAll("form[data-confirm]").forEach((form) => {
  form.addEventListener("submit", (event) => { if (!window.confirm(form.dataset.confirm)) event.preventDefault(); });
});
