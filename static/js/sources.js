// Live progress of the corpus page's source syncs: polls the sources' state while one is queued or
// running, moves each bar, and reloads the page when a sync ends (its counts and reason show then).
(function () {
  "use strict";
  var table = document.getElementById("source-list");
  if (!table) { return; }
  var url = table.dataset.statusUrl;

  function poll() {
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (data) {
        if (!data) { return; }
        var live = false;
        data.sources.forEach(function (source) {
          var row = table.querySelector('tr[data-source="' + source.id + '"]');
          if (!row) { return; }
          var active = source.status === "queued" || source.status === "running";
          if (row.classList.contains("live") && !active) { location.reload(); return; }
          row.querySelector('[data-field="bar"]').value = source.percent;
          live = live || active;
        });
        if (live) { setTimeout(poll, 1500); }
      })
      .catch(function () { setTimeout(poll, 5000); });
  }

  if (table.querySelector("tr.live")) { poll(); }
}());
