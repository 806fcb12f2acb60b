// logbus console: the overview's charts (uPlot), message rates and queue depth. Everything
// else is plain HTML forms and links, with htmx reloading a page's region; without
// JavaScript the pages work the same, and the overview shows its numbers as tables.
"use strict";

(function () {
  var REFRESH_MS = 5000;
  var HEIGHT = 220;

  // what each chart draws from /rates.json: its series, labels and styles
  var CHARTS = {
    rates: {
      pick: function (data) { return [data.t, data.received, data.sent]; },
      axis: "messages/s",
      series: [
        { label: "received/s", stroke: "#1f6fb2", width: 2 },
        { label: "sent/s", stroke: "#b5472a", width: 2, dash: [6, 3] }
      ]
    },
    depth: {
      pick: function (data) { return [data.depth.t, data.depth.ready, data.depth.unacked]; },
      axis: "messages",
      series: [
        { label: "ready", stroke: "#1e6b2e", width: 2 },
        { label: "unacked", stroke: "#6a3d9a", width: 2, dash: [6, 3] }
      ]
    }
  };

  function width(el) { return Math.max(300, el.clientWidth); }

  function makeChart(el, spec) {
    var chart = null;
    return {
      draw: function (data) {
        var series = spec.pick(data);
        if (chart === null) {
          chart = new uPlot({
            width: width(el),
            height: HEIGHT,
            series: [{}].concat(spec.series),
            axes: [{}, { label: spec.axis }],
            legend: { show: false }  // the page says what the lines are; a table without headers would not
          }, series, el);
        } else {
          chart.setData(series);
        }
      },
      resize: function () { if (chart !== null) chart.setSize({ width: width(el), height: HEIGHT }); }
    };
  }

  function start(elements) {
    if (typeof uPlot === "undefined" || elements.length === 0) return;
    var charts = [];
    var src = elements[0].dataset.src;
    for (var i = 0; i < elements.length; i++) {
      var spec = CHARTS[elements[i].dataset.series];
      if (spec) charts.push(makeChart(elements[i], spec));
    }
    function load() {  // one request feeds every chart
      fetch(src, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (data) { if (data) charts.forEach(function (c) { c.draw(data); }); })
        .catch(function () {});
    }
    load();
    setInterval(load, REFRESH_MS);
    window.addEventListener("resize", function () { charts.forEach(function (c) { c.resize(); }); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    start(document.querySelectorAll(".chart[data-src]"));
  });
})();
