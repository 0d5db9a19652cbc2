/* The dashboard's script: draws the charts (Chart.js) from the JSON the server put in
   the page, redraws them when htmx swaps a section in, and tells the submit form's live
   check which fields the user has touched. Everything else is server-rendered. */
(function () {
  "use strict";

  // team colours: the same as the CSS variables --t0..--t9
  var COLOURS = ["#1d4ed8", "#c2410c", "#047857", "#a21caf", "#0e7490",
                 "#854d0e", "#6d28d9", "#be123c", "#4d7c0f", "#334155"];

  // the fair-share chart's series (guarantee, held, borrowed, limit) are not teams: none
  // of their colours is a team colour ("Held now" was team t0's blue, "Borrowed" t1's
  // orange, so a reader took them for those teams)
  var SERIES = { guarantee: "#98a2b3", held: "#101828", borrowed: "#f5b40b",
                 borrowedEdge: "#6b4e00", limit: "rgba(245,180,11,0.15)" };

  function colour(i, alpha) {
    var c = COLOURS[i % COLOURS.length];
    if (alpha === undefined) return c;
    var n = parseInt(c.slice(1), 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + alpha + ")";
  }

  function readJSON(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }

  var BUILDERS = {
    fairshare: function (d) {
      return {
        type: "bar",
        data: {
          labels: d.labels,
          datasets: [
            { label: "Guarantee", data: d.guarantee, backgroundColor: SERIES.guarantee },
            { label: "Held now", data: d.held, backgroundColor: SERIES.held },
            { label: "Borrowed", data: d.borrowed, backgroundColor: SERIES.borrowed,
              borderColor: SERIES.borrowedEdge, borderWidth: 1 },
            { label: "Borrow limit", data: d.borrow_limit, backgroundColor: SERIES.limit,
              borderColor: SERIES.borrowedEdge, borderWidth: 1, borderDash: [4, 3] }
          ]
        },
        options: {
          responsive: true, maintainAspectRatio: false, animation: false,
          scales: { y: { beginAtZero: true, title: { display: true, text: "GPUs" } } },
          plugins: { legend: { position: "bottom" } }
        }
      };
    },
    usage: function (d) {
      // each team in its own colour (the one its chips use), and its guarantee as a
      // dashed line of the same colour
      var sets = [];
      d.series.forEach(function (s) {
        sets.push({ label: s.name, data: s.held, borderColor: colour(s.colour),
                    backgroundColor: colour(s.colour, 0.1), stepped: true, pointRadius: 0,
                    borderWidth: 2 });
        sets.push({ label: s.name + " guarantee", data: d.labels.map(function () { return s.guaranteed; }),
                    borderColor: colour(s.colour, 0.8), borderDash: [6, 4], borderWidth: 1,
                    pointRadius: 0, fill: false });
      });
      return {
        type: "line",
        data: { labels: d.labels, datasets: sets },
        options: {
          responsive: true, maintainAspectRatio: false, animation: false,
          interaction: { mode: "index", intersect: false },
          scales: { y: { beginAtZero: true, title: { display: true, text: "GPUs held" } },
                    x: { ticks: { autoSkip: false, maxRotation: 0,
                                  callback: function (value, index) {
                                    return d.ticks[index] ? d.labels[index] : null;
                                  } } } },
          plugins: { legend: { position: "bottom", labels: { filter: function (item) {
            return !/ guarantee$/.test(item.text); } } } }
        }
      };
    }
  };

  // the what-if page: one chart a team, its GPUs held over the horizon before and after.
  // The time is a linear axis (hours, or minutes or seconds for a horizon under an hour)
  // ticked every d.x_step (whole units or a round fraction, chosen by the view: a category
  // axis skipped its labels to 1.12, 2.25, 3.38 h); GPUs are whole
  BUILDERS.whatif = function (d) {
    function points(values) {
      return values.map(function (y, i) { return { x: d.labels[i], y: y }; });
    }
    return {
      type: "line",
      data: {
        datasets: [
          { label: "baseline", data: points(d.baseline), borderColor: "#98a2b3",
            backgroundColor: "rgba(152,162,179,0.15)", stepped: true, pointRadius: 0, borderWidth: 2 },
          { label: "what if", data: points(d.whatif), borderColor: colour(0),
            backgroundColor: colour(0, 0.1), stepped: true, pointRadius: 0, borderWidth: 2,
            borderDash: [6, 3] }
        ]
      },
      options: {
        responsive: true, maintainAspectRatio: false, animation: false,
        interaction: { mode: "index", intersect: false },
        scales: { y: { beginAtZero: true, title: { display: true, text: "GPUs held" },
                       ticks: { precision: 0 } },
                  x: { type: "linear", min: 0, max: d.x_max,
                       title: { display: true, text: d.x_title },
                       ticks: { stepSize: d.x_step, autoSkip: false,
                                callback: function (value) { return String(+value.toFixed(2)); } } } },
        plugins: { legend: { position: "bottom" } }
      }
    };
  };

  function drawCharts(root) {
    if (typeof window.Chart === "undefined") return;
    // a section swapped out took its canvas along: free those charts
    Object.values(window.Chart.instances || {}).forEach(function (chart) {
      if (!chart.canvas || !chart.canvas.isConnected) chart.destroy();
    });
    var canvases = (root || document).querySelectorAll("canvas[data-chart]");
    canvases.forEach(function (canvas) {
      if (window.Chart.getChart(canvas)) return;
      var build = BUILDERS[canvas.dataset.chart];
      var data = readJSON(canvas.dataset.source);
      if (!build || !data) return;
      new window.Chart(canvas, build(data));
      canvas.dataset.drawn = "1";
    });
  }

  // the submit form: the live check reports errors only for fields already touched
  document.addEventListener("change", function (event) {
    var form = event.target.closest && event.target.closest("form[data-touched-form]");
    if (!form || !event.target.name) return;
    var slot = form.querySelector("input[name=_touched]");
    var names = slot.value ? slot.value.split(",") : [];
    if (names.indexOf(event.target.name) < 0) names.push(event.target.name);
    slot.value = names.join(",");
  }, true);

  // the submit form's key, copied where the browser's Back restores it with the values
  // typed (forms.RestoredKeyInput): Back fetches the form again with a new key, and
  // Submit made a second job; a restored key is kept
  document.querySelectorAll("input[data-restored-key]").forEach(function (input) {
    var key = input.form && input.form.elements.idempotency_key;
    if (!input.value && key) input.value = key.value;
  });

  // a field whose error slot has text is invalid, for the eye and for assistive technology
  function syncFieldErrors() {
    document.querySelectorAll("p.field-error[id^='err-']").forEach(function (slot) {
      var field = document.getElementById("field-" + slot.id.slice(4));
      if (!field) return;
      var bad = slot.textContent.trim() !== "";
      field.classList.toggle("has-error", bad);
      var input = field.querySelector("input, select, textarea");
      if (input) input.setAttribute("aria-invalid", bad ? "true" : "false");
    });
  }
  document.addEventListener("htmx:oobAfterSwap", syncFieldErrors);
  document.addEventListener("htmx:afterSettle", syncFieldErrors);

  // the map's node panel: a node's button loads it (htmx), this shows it and gives it the
  // focus; Close or Escape hides it and gives the focus back to the node
  var panelOpener = null;
  document.addEventListener("htmx:afterSwap", function (event) {
    var panel = event.detail.target;
    if (!panel || panel.id !== "node-panel") return;
    panelOpener = event.detail.requestConfig && event.detail.requestConfig.elt;
    panel.hidden = false;
    var close = panel.querySelector("[data-close-panel]");
    if (close) close.focus();
  });
  function closePanel() {
    var panel = document.getElementById("node-panel");
    if (!panel || panel.hidden) return;
    panel.hidden = true;
    // the map may have been redrawn since: find the node's button again by its URL
    var url = panelOpener && panelOpener.getAttribute("hx-get");
    var again = url && document.querySelector("button[hx-get='" + url + "']");
    if (again) again.focus();
  }
  document.addEventListener("click", function (event) {
    if (event.target.closest && event.target.closest("[data-close-panel]")) closePanel();
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") closePanel();
  });

  // the operator's quota inputs: typed but not saved marks the row, so the table's poll
  // waits instead of wiping it
  document.addEventListener("input", function (event) {
    if (event.target.closest && event.target.closest(".quota-form")) {
      event.target.setAttribute("data-dirty", "1");
    }
  });

  // A section marked data-hold-while-editing skips its poll while the operator is in it
  // (focus inside, a drain form open, a quota typed and not saved): the swap would wipe
  // what they typed. Here and not in an hx-trigger filter, which htmx evaluates as code:
  // the production Content-Security-Policy forbids that (no 'unsafe-eval'), and htmx then
  // swapped at every poll (found 2026-12-07). A poll's request carries no triggering
  // event; the refresh after the operator's own change (cluster-changed) goes through.
  function editing(elt) {
    return elt.contains(document.activeElement) ||
      elt.querySelector("details[open], [data-dirty]") !== null;
  }
  document.addEventListener("htmx:confirm", function (event) {
    var elt = event.detail.elt;
    if (!event.detail.triggeringEvent && elt.hasAttribute &&
        elt.hasAttribute("data-hold-while-editing") && editing(elt)) {
      event.preventDefault();
    }
  });

  // The answer to an operator's change (Saved, or why it was refused) outlives the swaps
  // that follow it for data-keep-s seconds: the section's refresh after the save came
  // 0.2 s later and wiped it, and a refusal vanished at the next poll (found 2026-12-07).
  // An element with an id and data-keep-s that arrives with text is kept; an empty one of
  // that id swapped in before the time is up gets the text back.
  var keptNotes = {};
  function keepNotes() {
    var now = Date.now();
    document.querySelectorAll("[data-keep-s][id]").forEach(function (note) {
      var kept = keptNotes[note.id];
      if (kept && kept.el === note) return;  // seen at an earlier swap
      if (note.textContent.trim()) {  // a new answer
        keptNotes[note.id] = {el: note, html: note.innerHTML,
                              until: now + 1000 * Number(note.getAttribute("data-keep-s"))};
      } else if (kept && kept.until > now) {  // swapped in empty while the answer holds
        note.innerHTML = kept.html;
        kept.el = note;
      }
    });
  }
  document.addEventListener("htmx:afterSwap", keepNotes);
  document.addEventListener("htmx:oobAfterSwap", keepNotes);

  // a search box that hides the rows that do not contain its text (the node table); it
  // runs again when a poll swaps the rows in
  function filterRows(input) {
    var needle = input.value.trim().toLowerCase();
    document.querySelectorAll(input.dataset.filterRows).forEach(function (row) {
      row.hidden = needle !== "" && row.textContent.toLowerCase().indexOf(needle) < 0;
    });
  }
  function filterAll() {
    document.querySelectorAll("input[data-filter-rows]").forEach(filterRows);
  }
  document.addEventListener("input", function (event) {
    if (event.target.matches && event.target.matches("input[data-filter-rows]")) {
      filterRows(event.target);
    }
  });
  document.addEventListener("htmx:afterSettle", filterAll);

  // the job list's filters apply as soon as one changes: no Apply button to find
  document.addEventListener("change", function (event) {
    var form = event.target.closest && event.target.closest("form[data-auto-submit]");
    if (form) form.requestSubmit();
  });

  function start() {
    drawCharts(document);
    if (window.htmx) window.htmx.onLoad(function (elt) { drawCharts(elt); });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
