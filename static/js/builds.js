// Live build progress on the corpus page: websocket events when the channel layer reaches the
// worker (Redis), and polling of the status endpoint while a build is queued or running (always
// works, also with the embedded mode's separate worker process).
(function () {
  "use strict";
  var table = document.getElementById("builds");
  if (!table) { return; }
  var statusUrl = table.dataset.statusUrl;
  var pollTimer = null;
  // As the pages name them (corpus/templatetags/portal.py PHASE_NAMES).
  var PHASE_NAMES = { tokenizer: "loading the tokenizer", activate: "checks before the switch",
                      activation: "switch to the new build", words: "exact-word index",
                      text_store: "late-interaction fill", publish: "publishing to object storage" };

  // A reload would abort the uploads still in flight (an upload queues an append, whose events
  // arrive here): while uploads.js sends files, the page stays and its "Show the new datasets" reloads.
  function reload(delay) {
    if (document.body.dataset.uploading === "1") { return; }
    setTimeout(function () { location.reload(); }, delay);
  }

  function count(n) { return Number(n).toLocaleString("en-US"); }

  // A rate as the pages write it (corpus/templatetags/portal.py `rate`): "1,168/s", "3.4/s".
  function rate(value) {
    return (value >= 10 ? count(Math.round(value)) : value.toFixed(1)) + "/s";
  }

  function render(build) {
    var row = table.querySelector('tr[data-build="' + build.id + '"]');
    if (!row) { if (build.status === "queued" || build.status === "running") { reload(0); } return; }
    var status = row.querySelector('[data-field="status"]');
    var wasLive = row.classList.contains("live");
    status.textContent = build.status.charAt(0).toUpperCase() + build.status.slice(1);
    status.className = "status " + build.status;
    row.querySelector('[data-field="bar"]').value = build.percent;
    var live = build.status === "queued" || build.status === "running";
    var detail = "";
    if (live) {
      detail = " · " + (PHASE_NAMES[build.phase] || (build.phase || "").replace(/_/g, " "));
      if (build.total) { detail += " " + count(build.done) + " of " + count(build.total); }
      if (build.rate) { detail += " · " + rate(build.rate); }
    }
    var phase = row.querySelector('[data-field="phase"]');
    phase.textContent = detail;
    var percent = document.createElement("span");
    percent.dataset.field = "percent";
    percent.textContent = build.percent + " %";
    phase.prepend(percent);
    row.classList.toggle("live", live);
    if (wasLive && !live) { reload(600); }
  }

  // The meaning phase after a build (corpus.services.meaning_jobs.meaning_state), as the page
  // shows it on load: its bar, memories read, segments, rate and time left; a reload when it ends
  // or when it starts on a page that had none.
  var meaningShown = document.getElementById("meaning-progress");
  function duration(s) {
    if (s < 60) { return s.toFixed(1) + " s"; }
    var m = Math.floor(Math.round(s) / 60);
    return m < 60 ? m + " min " + (Math.round(s) % 60) + " s" : Math.floor(m / 60) + " h " + (m % 60) + " min";
  }
  function renderMeaning(meaning) {
    var busy = meaning && (meaning.waiting > 0 || meaning.failed > 0);
    if (!meaningShown) { if (busy && meaning.waiting > 0) { reload(0); } return; }
    if (!busy) { reload(600); return; }
    var bar = meaningShown.querySelector("progress");
    bar.max = meaning.total;
    bar.value = meaning.done;
    var text = " " + count(meaning.done) + " of " + count(meaning.total) + " memories, " +
      meaning.segments_read + " of " + meaning.segments + " segment" + (meaning.segments === 1 ? "" : "s");
    if (meaning.rate) { text += " · " + rate(meaning.rate); }
    if (meaning.seconds_left) { text += " · about " + duration(meaning.seconds_left) + " left"; }
    if (meaning.failed) { text += " · " + meaning.failed + " failed: " + (meaning.errors[0] || ""); }
    while (bar.nextSibling) { bar.parentNode.removeChild(bar.nextSibling); }
    bar.after(text);
  }

  function anyLive() {
    return table.querySelector("tr.live") !== null || (meaningShown !== null && meaningShown.dataset.live === "1");
  }

  function poll() {
    fetch(statusUrl, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (data) {
        if (data) { data.builds.forEach(render); if (data.meaning) { renderMeaning(data.meaning); } }
      })
      .finally(function () { pollTimer = anyLive() ? setTimeout(poll, 1500) : null; });
  }

  function connect() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + location.host + "/ws/corpora/" + table.dataset.corpus + "/builds/");
    socket.onmessage = function (message) {
      var event = JSON.parse(message.data);
      if (event.build) { render(event.build); }
      if (event.op === "meaning" && event.meaning) { renderMeaning(event.meaning); }
      if (event.op === "queued" && !pollTimer) { pollTimer = setTimeout(poll, 500); }
    };
    // 4401 (logged out) and 4404 (not readable) are final: reconnecting would only repeat them.
    socket.onclose = function (event) { if (event.code !== 4401 && event.code !== 4404) { setTimeout(connect, 5000); } };
  }

  if (anyLive()) { poll(); }
  if ("WebSocket" in window) { connect(); }
})();
