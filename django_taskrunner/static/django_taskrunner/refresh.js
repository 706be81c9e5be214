/* django-taskrunner admin: refresh a table every few seconds from a JSON view, with no
   page reload. A table opts in with data-live-url (and data-refresh-seconds):
   - the queues summary (a row per queue, cells with data-field) gets new figures;
   - the running-tasks list (class tr-task-list) gets its rows rebuilt.
   Every value goes in through textContent, never as HTML. */
(function () {
  "use strict";

  function fetchJson(url) {
    return fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      });
  }

  function updateQueues(table, data) {
    Object.keys(data.queues || {}).forEach(function (name) {
      var anchor = Array.prototype.find.call(table.querySelectorAll("a[href^='#queue-']"),
        function (a) { return a.getAttribute("href") === "#queue-" + name; });
      var row = anchor && anchor.closest("tr");
      if (!row) { return; }
      var figures = data.queues[name];
      // The summary row, and the figures of the queue's own panel below it.
      var places = [row, document.getElementById("queue-" + name)];
      places.forEach(function (place) {
        if (!place) { return; }
        Object.keys(figures).forEach(function (field) {
          var cell = place.querySelector('[data-field="' + field + '"]');
          if (!cell) { return; }
          var target = cell.querySelector("a") || cell;
          target.textContent = String(figures[field]);
        });
      });
    });
  }

  function cell(row, value, className) {
    var td = document.createElement("td");
    if (className) { td.className = className; }
    td.textContent = value === null || value === undefined ? "" : String(value);
    row.appendChild(td);
    return td;
  }

  function updateRunning(table, data) {
    var body = table.querySelector("tbody");
    var rows = document.createDocumentFragment();
    (data.rows || []).forEach(function (item) {
      var tr = document.createElement("tr");
      var first = cell(tr, "");
      var link = document.createElement("a");
      link.href = item.url;
      link.textContent = item.task;
      first.appendChild(link);
      cell(tr, item.id, "tr-key");
      cell(tr, item.stream_id, "tr-key");
      cell(tr, item.consumer, "tr-key");
      cell(tr, item.idle, "num");
      cell(tr, item.deliveries, "num");
      var payload = cell(tr, "", "payload");
      var code = document.createElement("code");
      code.className = "tr-preview";
      code.textContent = item.payload;
      payload.appendChild(code);
      rows.appendChild(tr);
    });
    if (!data.rows || !data.rows.length) {
      var empty = document.createElement("tr");
      cell(empty, "No running task.").colSpan = 7;
      rows.appendChild(empty);
    }
    body.replaceChildren(rows);
  }

  function start(table) {
    var url = table.getAttribute("data-live-url");
    var seconds = parseFloat(table.getAttribute("data-refresh-seconds")) || 5;
    var update = table.classList.contains("tr-task-list") ? updateRunning : updateQueues;
    function tick() {
      fetchJson(url).then(function (data) {
        update(table, data);
        table.setAttribute("data-refreshed", String(Date.now()));
      }).catch(function () { /* keep the figures shown; try again next time */ })
        .then(function () { window.setTimeout(tick, seconds * 1000); });
    }
    window.setTimeout(tick, seconds * 1000);
  }

  document.querySelectorAll("table[data-live-url]").forEach(start);
}());
