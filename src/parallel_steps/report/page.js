(function () {
  Bokeh.logger.set_level("warn");
  const D = JSON.parse(document.getElementById("report-data").textContent);
  const P = Bokeh.Plotting;
  const COLORS = {succeeded: "#2da44e", failed: "#cf222e", timed_out: "#fb8500", crashed: "#6e4c13", out_of_memory: "#8250df"};
  const MARKERS = {started: ["triangle", "#2da44e"], crashed: ["x", "#6e4c13"], timed_out: ["diamond", "#fb8500"],
                   out_of_memory: ["square", "#8250df"], init_failed: ["asterisk", "#cf222e"]};
  const T = D.timeline, B = inSeconds(T.bars);
  const latest = (values, since) => values.reduce((a, b) => Math.max(a, b), since);  // no spread: 20,000+ values
  const end = latest(T.job_events.map(e => e.t), latest(T.markers.map(m => m.t), latest(B.end, 0))) || 1;
  const x_range = new Bokeh.Range1d({start: -0.01 * end, end: end * 1.01});

  function inSeconds(bars) {  // the bars' times come as whole milliseconds (shorter and quicker to write than floats)
    const {start_ms, end_ms, ...rest} = bars;
    return {...rest, start: start_ms.map(ms => ms / 1e3), end: end_ms.map(ms => ms / 1e3)};
  }
  function figure(options) {
    return P.figure({sizing_mode: "stretch_width", x_range, tools: "xpan,xwheel_zoom,box_zoom,reset,save",
                     toolbar_location: null, min_border_left: 150, ...options});
  }
  function columns(names, keep) {  // the columns of B restricted to the rows where keep(i)
    const out = {};
    for (const name of names) out[name] = [];
    B.start.forEach((_, i) => { if (keep(i)) for (const name of names) out[name].push(B[name][i]); });
    return out;
  }
  function jobSpans(p) {
    for (const e of T.job_events) {
      if (e.kind === "job_finished") continue;
      p.add_layout(new Bokeh.Span({location: e.t, dimension: "height", line_color: "#cf222e", line_dash: "dashed", line_width: 2}));
    }
    for (const oom of D.resources.oom) {
      p.add_layout(new Bokeh.Span({location: oom.t, dimension: "height", line_color: COLORS.out_of_memory, line_width: 2}));
    }
  }

  function timeline() {
    const rows = T.workers.slice().reverse();
    const p = figure({height: 70 + 24 * Math.max(rows.length, 3), y_range: new Bokeh.FactorRange({factors: rows}),
                      title: "Attempts per worker"});
    const bars = [], items = [];
    if (T.starting.start.length) {
      const starting = p.hbar({y: {field: "worker"}, left: {field: "start"}, right: {field: "end"}, height: 0.72,
        fill_color: "#d0d7de", line_color: null, source: new Bokeh.ColumnDataSource({data: T.starting})});
      p.add_tools(new Bokeh.HoverTool({renderers: [starting], tooltips: [["worker", "@worker"], ["starting", "@start{0.000} s to @end{0.000} s"]]}));
      items.push(new Bokeh.LegendItem({label: "starting (init)", renderers: [starting]}));
    }
    for (const outcome of Object.keys(COLORS)) {
      const data = columns(Object.keys(B), i => B.outcome[i] === outcome);
      if (!data.start.length) continue;
      bars.push(p.hbar({y: {field: "worker"}, left: {field: "start"}, right: {field: "end"}, height: 0.72,
                        fill_color: COLORS[outcome], line_color: null, source: new Bokeh.ColumnDataSource({data})}));
      items.push(new Bokeh.LegendItem({label: outcome.replace("_", " "), renderers: [bars[bars.length - 1]]}));
    }
    p.add_tools(new Bokeh.HoverTool({renderers: bars, tooltips: [
      ["mini-batch", "@mini_batch (attempt @attempt)"], ["outcome", "@outcome"], ["worker", "@worker"],
      ["time", "@start{0.000} s to @end{0.000} s"], ["items", "@items"], ["attempts in this bar", "@count"], ["error", "@error"]]}));
    const marks = [];
    for (const [kind, [marker, color]] of Object.entries(MARKERS)) {
      const found = T.markers.filter(m => m.kind === kind);
      if (!found.length) continue;
      marks.push(p.scatter({x: {field: "t"}, y: {field: "worker"}, marker, size: 12, fill_color: color, line_color: color,
        source: new Bokeh.ColumnDataSource({data: {t: found.map(m => m.t), worker: found.map(m => m.worker), label: found.map(m => m.label)}})}));
      items.push(new Bokeh.LegendItem({label: kind === "started" ? "ready" : kind.replace("_", " "), renderers: [marks[marks.length - 1]]}));
    }
    p.add_tools(new Bokeh.HoverTool({renderers: marks, tooltips: [["worker", "@worker"], ["at", "@t{0.000} s"], ["", "@label"]]}));
    jobSpans(p);
    p.add_layout(new Bokeh.Legend({items, orientation: "horizontal", click_policy: "hide", location: "top_left"}), "above");
    return p;
  }

  function throughput() {
    const S = D.throughput;
    const p = figure({height: 220, title: `Finished per second (bins of ${S.bin_s} s)`, y_axis_label: "mini-batches / s"});
    p.step({x: S.t, y: S.mini_batches_per_s, mode: "after", line_width: 2, color: "#0969da", legend_label: "mini-batches / s"});
    const top = Math.max(1, ...S.items_per_s) * 1.05;
    p.extra_y_ranges = {items: new Bokeh.Range1d({start: 0, end: top})};
    p.add_layout(new Bokeh.LinearAxis({y_range_name: "items", axis_label: "items / s"}), "right");
    p.step({x: S.t, y: S.items_per_s, mode: "after", line_width: 1.5, color: "#8250df", y_range_name: "items", legend_label: "items / s"});
    p.legend.location = "top_left";
    jobSpans(p);
    return p;
  }

  function busy() {
    const S = D.throughput;
    const p = figure({height: 160, title: "Busy workers (average per bin)", y_axis_label: "workers"});
    p.varea_step({x: S.t, y1: S.t.map(() => 0), y2: S.busy_workers, step_mode: "after", fill_color: "#0969da", fill_alpha: 0.35});
    jobSpans(p);
    return p;
  }

  function resources() {
    const R = D.resources, charts = [];
    const nodes = Object.entries(R.nodes);
    if (nodes.length) {
      const p = figure({height: 200, title: "Machine CPU and memory per node", y_axis_label: "%", y_range: new Bokeh.Range1d({start: 0, end: 105})});
      nodes.forEach(([node, n], i) => {  // samples as dots: with few of them, the lines between are guesses
        for (const [key, color, what] of [["cpu_percent", "#0969da", "CPU"], ["memory_percent", "#8250df", "memory"]]) {
          const legend_label = `${node} ${what} %`;
          p.line({x: n.t, y: n[key], line_width: 2, color, line_dash: i ? "dotted" : "solid", legend_label});
          p.scatter({x: n.t, y: n[key], size: 6, color, legend_label});
        }
      });
      p.legend.location = "top_left";
      jobSpans(p);
      charts.push(p);
    }
    const workers = Object.entries(R.workers);
    if (workers.length) {
      const p = figure({height: 200, title: "Worker memory (RSS)", y_axis_label: "MB"});
      const palette = ["#0969da", "#8250df", "#2da44e", "#fb8500", "#cf222e", "#6e4c13", "#1b7c83", "#bf3989"];
      const lines = workers.map(([worker, w], i) => {
        const source = new Bokeh.ColumnDataSource({data: {x: w.t, y: w.rss_mb, worker: w.t.map(() => worker)}});
        p.line({x: {field: "x"}, y: {field: "y"}, line_width: 1.5, color: palette[i % palette.length], source});
        return p.scatter({x: {field: "x"}, y: {field: "y"}, size: 6, color: palette[i % palette.length], source});
      });
      p.add_tools(new Bokeh.HoverTool({renderers: lines, tooltips: [["worker", "@worker"], ["at", "@x{0.0} s"], ["RSS", "@y MB"]]}));
      jobSpans(p);
      charts.push(p);
    }
    return charts;
  }

  function durations() {
    const H = D.durations;
    const p = P.figure({height: 220, sizing_mode: "stretch_width", tools: "xpan,xwheel_zoom,box_zoom,reset,save",
                        x_axis_label: "seconds", y_axis_label: "attempts", toolbar_location: "right"});
    p.quad({left: H.edges.slice(0, -1), right: H.edges.slice(1), top: H.counts, bottom: H.counts.map(() => 0),
            fill_color: "#0969da", line_color: "#ffffff"});
    return p;
  }

  const shown = [P.show(P.gridplot([[timeline()], [throughput()], [busy()], ...resources().map(c => [c])],
                                   {sizing_mode: "stretch_width", toolbar_location: "right"}), "#over-time")];
  if (D.durations) shown.push(P.show(durations(), "#durations"));
  Promise.all(shown).then(() => { document.body.dataset.rendered = String(shown.length); });
})();
