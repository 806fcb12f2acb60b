// logbus console: the charts (uPlot): the overview's message rates and queue depth, and an
// object's rates on its page (a queue, an exchange, a topic). Everything
// else is plain HTML forms and links, with htmx reloading a page's region; without
// JavaScript the pages work the same, and the overview says its figures in its facts and tables.
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
    queue: {  // one queue's page: /rates.json?object=queues/<vhost>/<name>
      pick: function (data) { return [data.t, data.routed || [], data.delivered || [], data.acked || []]; },
      axis: "messages/s",
      series: [
        { label: "routed/s", stroke: "#1f6fb2", width: 2 },
        { label: "delivered/s", stroke: "#b5472a", width: 2, dash: [6, 3] },
        { label: "acked/s", stroke: "#1e6b2e", width: 2, dash: [2, 3] }
      ]
    },
    connection: {  // a connection's page: /rates.json?object=connections/<id>
      pick: function (data) { return [data.t, data.received || [], data.sent || []]; },
      axis: "messages/s",
      series: [
        { label: "in/s", stroke: "#1f6fb2", width: 2 },
        { label: "out/s", stroke: "#b5472a", width: 2, dash: [6, 3] }
      ]
    },
    appended: {  // an exchange's or a topic's page: records appended to its log topic
      pick: function (data) { return [data.t, data.appended || []]; },
      axis: "messages/s",
      series: [{ label: "appended/s", stroke: "#1f6fb2", width: 2 }]
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

  // the time axis: ticks on whole seconds (minutes, hours as the span grows), each read as
  // the browser's clock time, "12:04:25"; uPlot's own labels would read ":25.500" over a few
  // seconds and "4:12pm" over minutes
  var SECONDS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  function two(n) { return (n < 10 ? "0" : "") + n; }
  function clock(t) {
    var d = new Date(t * 1000);
    return two(d.getHours()) + ":" + two(d.getMinutes()) + ":" + two(d.getSeconds());
  }
  var TIME_AXIS = {
    incrs: SECONDS,
    space: 70,  // pixels a label needs
    values: function (u, splits) { return splits.map(clock); }
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
            axes: [TIME_AXIS, { label: spec.axis }],
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
