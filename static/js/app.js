/* The dashboard's script: draws the charts (Chart.js) from the JSON the server put in
   the page, redraws them when htmx swaps a section in, and tells the submit form's live
   check which fields the user has touched. Everything else is server-rendered. */
(function () {
  "use strict";

  // team colours: the same as the CSS variables --t0..--t9
  var COLOURS = ["#1d4ed8", "#c2410c", "#047857", "#a21caf", "#0e7490",
                 "#854d0e", "#6d28d9", "#be123c", "#4d7c0f", "#334155"];

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
            { label: "Guarantee", data: d.guarantee, backgroundColor: "#98a2b3" },
            { label: "Held now", data: d.held, backgroundColor: "#1d4ed8" },
            { label: "Borrowed", data: d.borrowed, backgroundColor: "#c2410c" },
            { label: "Borrow limit", data: d.borrow_limit, backgroundColor: "rgba(194,65,12,0.25)",
              borderColor: "#c2410c", borderWidth: 1 }
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
      return {
        type: "line",
        data: {
          labels: d.labels,
          datasets: d.series.map(function (s, i) {
            return { label: s.name, data: s.held, borderColor: colour(i), backgroundColor: colour(i, 0.1),
                     stepped: true, pointRadius: 0, borderWidth: 2 };
          })
        },
        options: {
          responsive: true, maintainAspectRatio: false, animation: false,
          interaction: { mode: "index", intersect: false },
          scales: { y: { beginAtZero: true, title: { display: true, text: "GPUs held" } },
                    x: { ticks: { maxTicksLimit: 12 } } },
          plugins: { legend: { position: "bottom" } }
        }
      };
    }
  };

  // the what-if page: one chart a team, its GPUs held over the horizon before and after
  BUILDERS.whatif = function (d) {
    return {
      type: "line",
      data: {
        labels: d.labels,
        datasets: [
          { label: "baseline", data: d.baseline, borderColor: "#98a2b3",
            backgroundColor: "rgba(152,162,179,0.15)", stepped: true, pointRadius: 0, borderWidth: 2 },
          { label: "what if", data: d.whatif, borderColor: colour(0),
            backgroundColor: colour(0, 0.1), stepped: true, pointRadius: 0, borderWidth: 2,
            borderDash: [6, 3] }
        ]
      },
      options: {
        responsive: true, maintainAspectRatio: false, animation: false,
        interaction: { mode: "index", intersect: false },
        scales: { y: { beginAtZero: true, title: { display: true, text: "GPUs held" } },
                  x: { title: { display: true, text: "hours from now" },
                       ticks: { maxTicksLimit: 12 } } },
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

  function start() {
    drawCharts(document);
    if (window.htmx) window.htmx.onLoad(function (elt) { drawCharts(elt); });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
