// Dataset uploads on the corpus page: several files, a folder or ZIPs, by picking or drag and drop.
// Each file goes up in its own request so it gets its own progress bar and its own result; the
// server answers JSON per file. Without JavaScript the same form posts all files at once.
(function () {
  "use strict";
  var form = document.getElementById("upload-form");
  if (!form) { return; }
  var zone = document.getElementById("drop-zone");
  var list = document.getElementById("upload-list");
  var fileInput = document.getElementById("id_file");
  var folderInput = document.getElementById("folder-input");
  var csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  var queue = [];
  var running = false;
  var stored = 0;

  function row(name) {
    var item = document.createElement("li");
    item.className = "upload-item";
    var label = document.createElement("span");
    label.className = "upload-name";
    label.textContent = name;
    var bar = document.createElement("progress");
    bar.max = 100; bar.value = 0;
    bar.setAttribute("aria-label", "Upload of " + name);
    var state = document.createElement("span");
    state.className = "upload-state muted";
    state.textContent = "waiting";
    item.append(label, bar, state);
    list.append(item);
    return { item: item, bar: bar, state: state };
  }

  function finish(entry, ok, text) {
    // A refused file gets no full bar (it was not stored): only its reason.
    entry.bar.value = 100;
    entry.bar.hidden = !ok;
    entry.item.classList.add(ok ? "ok" : "failed");
    entry.state.className = "upload-state " + (ok ? "ok" : "error");
    entry.state.textContent = text;
  }

  function send(job) {
    return new Promise(function (resolve) {
      var body = new FormData();
      body.append("file", job.file, job.name);
      // The readers named on the form apply to every file of the batch (checked per request).
      ["reader_groups", "reader_users"].forEach(function (name) {
        var field = form.elements.namedItem(name);
        if (field && field.value.trim()) { body.append(name, field.value); }
      });
      var request = new XMLHttpRequest();
      request.open("POST", form.action);
      request.setRequestHeader("Accept", "application/json");
      request.setRequestHeader("X-CSRFToken", csrf);
      request.upload.addEventListener("progress", function (event) {
        if (event.lengthComputable) {
          job.entry.bar.value = Math.round(95 * event.loaded / event.total);
          job.entry.state.textContent = Math.round(100 * event.loaded / event.total) + " %";
        }
      });
      request.addEventListener("load", function () {
        var results = [];
        try {
          var answer = JSON.parse(request.responseText);
          results = answer.results || [];
          // What makes the new files searchable: an append, the first build, or a build to start.
          if (answer.indexing) { document.getElementById("upload-indexing").textContent = answer.indexing; }
        } catch (error) { results = []; }
        if (!results.length) {
          finish(job.entry, false, "Upload failed (HTTP " + request.status + ")");
        } else if (results.length === 1) {
          finish(job.entry, results[0].ok, results[0].ok ? results[0].message : results[0].error);
        } else {  // a ZIP: one line per file in it
          var good = results.filter(function (r) { return r.ok; }).length;
          finish(job.entry, good > 0, good + " of " + results.length + " files stored");
          results.forEach(function (r) { finish(row(r.name), r.ok, r.ok ? r.message : r.error); });
        }
        stored += results.filter(function (r) { return r.ok; }).length;
        if (stored > 0) {
          // The corpus has datasets now: its empty state would contradict the list below.
          var empty = document.getElementById("datasets-empty");
          if (empty) { empty.hidden = true; }
        }
        resolve();
      });
      request.addEventListener("error", function () { finish(job.entry, false, "Network error"); resolve(); });
      job.entry.state.textContent = "uploading";
      request.send(body);
    });
  }

  function pump() {
    if (running) { return; }
    var job = queue.shift();
    document.body.dataset.uploading = job ? "1" : "0";
    if (!job) {
      if (stored > 0) {
        var done = document.getElementById("upload-done");
        done.hidden = false;
        done.querySelector("a").focus();
      }
      return;
    }
    running = true;
    send(job).then(function () { running = false; pump(); });
  }

  function add(file, name) {
    if (name.split("/").some(function (part) { return part.charAt(0) === "."; })) { return; }
    queue.push({ file: file, name: name, entry: row(name) });
  }

  function addFiles(files) {
    Array.prototype.forEach.call(files, function (file) { add(file, file.webkitRelativePath || file.name); });
    pump();
  }

  // A dropped folder arrives as a directory entry: walk it (readEntries returns batches).
  function walk(entry, path) {
    return new Promise(function (resolve) {
      if (entry.isFile) {
        entry.file(function (file) { add(file, path + file.name); resolve(); }, function () { resolve(); });
        return;
      }
      var reader = entry.createReader();
      var children = [];
      (function next() {
        reader.readEntries(function (batch) {
          if (!batch.length) {
            Promise.all(children.map(function (child) { return walk(child, path + entry.name + "/"); })).then(resolve);
            return;
          }
          children = children.concat(Array.prototype.slice.call(batch));
          next();
        }, function () { resolve(); });
      })();
    });
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    addFiles(fileInput.files);
    fileInput.value = "";
  });
  fileInput.addEventListener("change", function () { addFiles(fileInput.files); fileInput.value = ""; });
  folderInput.addEventListener("change", function () { addFiles(folderInput.files); folderInput.value = ""; });
  ["dragenter", "dragover"].forEach(function (type) {
    zone.addEventListener(type, function (event) { event.preventDefault(); zone.classList.add("dragging"); });
  });
  ["dragleave", "drop"].forEach(function (type) {
    zone.addEventListener(type, function () { zone.classList.remove("dragging"); });
  });
  zone.addEventListener("drop", function (event) {
    event.preventDefault();
    var items = event.dataTransfer.items;
    var entries = items ? Array.prototype.map.call(items, function (item) {
      return item.webkitGetAsEntry ? item.webkitGetAsEntry() : null;
    }) : [];
    if (entries.length && entries.every(function (e) { return e; })) {
      Promise.all(entries.map(function (e) { return walk(e, ""); })).then(pump);
    } else {
      addFiles(event.dataTransfer.files);
    }
  });
})();
