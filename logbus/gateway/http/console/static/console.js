// logbus console: the overview's rate chart (uPlot). Everything else is plain HTML forms
// and links, with htmx reloading a page's region; without JavaScript the pages work the
// same, and the overview shows the rates as a table.
"use strict";

(function () {
  var REFRESH_MS = 5000;

  function startChart(el) {
    if (typeof uPlot === "undefined") return;
    var chart = null;
    function draw(data) {
      var series = [data.t, data.received, data.sent];
      if (chart === null) {
        chart = new uPlot({
          width: Math.max(300, el.clientWidth),
          height: 220,
          series: [
            {},
            { label: "received/s", stroke: "#1f6fb2", width: 2 },
            { label: "sent/s", stroke: "#b5472a", width: 2, dash: [6, 3] }
          ],
          axes: [{}, { label: "messages/s" }],
          legend: { show: false }  // the page says what the lines are; a table without headers would not
        }, series, el);
      } else {
        chart.setData(series);
      }
    }
    function load() {
      fetch(el.dataset.src, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (data) { if (data) draw(data); })
        .catch(function () {});
    }
    load();
    setInterval(load, REFRESH_MS);
    window.addEventListener("resize", function () {
      if (chart !== null) chart.setSize({ width: Math.max(300, el.clientWidth), height: 220 });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var el = document.getElementById("rates-chart");
    if (el) startChart(el);
  });
})();
