// actviz's channel browser: one ES module, as anywidget loads it in Jupyter, JupyterLab,
// VS Code, Colab and marimo. The kernel holds the data; this draws the model's state
// (layers, the chosen layer's channel thumbnails, the chosen channel's detail) and sets
// `layer` and `channel` when the user picks one. No network, no server of its own.

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "style") node.style.cssText = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function fmt(value) {
  if (value === null || value === undefined) return "-";
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value)) return value.toLocaleString("en");
  return Number(value.toPrecision(4)).toString();
}

function statsTable(stats) {
  const rows = Object.entries(stats || {}).map(([key, value]) =>
    el("tr", {}, el("td", { style: "color:#57606a;padding-right:8px" }, key),
       el("td", {}, fmt(value))));
  return el("table", { class: "actviz-stats", style: "border-collapse:collapse" }, ...rows);
}

function render({ model, el: root }) {
  const box = el("div", {
    class: "actviz-browser",
    style: "font-family:system-ui,sans-serif;font-size:13px;color:#1f2328;max-width:900px",
  });
  root.append(box);

  function draw() {
    box.replaceChildren();
    const layers = model.get("layers") || [];
    const current = model.get("layer");
    const title = el("div", { style: "font-weight:600;margin-bottom:4px" },
                     `actviz ${model.get("unit") || "channels"} \u00b7 ` + (model.get("source") || ""));
    const select = el("select", {
      class: "actviz-layer",
      onchange: (event) => {
        model.set("layer", event.target.value);
        model.set("channel", -1);
        model.save_changes();
      },
    }, ...layers.map((layer) => {
      const option = el("option", { value: layer.key },
                        `${layer.key}  ${layer.type || ""}  ${layer.shape || ""}`);
      if (layer.key === current) option.selected = true;
      return option;
    }));
    box.append(title, el("div", {}, "layer ", select));
    if (model.get("message")) {
      box.append(el("div", { style: "color:#9a3b00;margin:4px 0" }, model.get("message")));
    }
    const chosen = model.get("channel");
    const strip = el("div", { class: "actviz-channels", style: "margin:6px 0" },
      ...(model.get("channels") || []).map((channel) => el("img", {
        src: channel.uri,
        title: channel.title || `channel ${channel.index}`,
        "data-channel": String(channel.index),
        width: String(channel.width || 48),
        height: String(channel.height || 48),
        style: "margin:1px;cursor:pointer;image-rendering:pixelated;border:2px solid " +
               (channel.index === chosen ? "#0969da" : "transparent"),
        onclick: () => { model.set("channel", channel.index); model.save_changes(); },
      })));
    box.append(strip);
    const detail = model.get("detail") || {};
    if (detail.uri || detail.title) {
      const tops = (detail.top || []).map((top) => el("figure",
        { style: "display:inline-block;margin:2px 6px 2px 0" },
        el("img", { src: top.uri, width: String(top.width || 96), title: top.label || "" }),
        el("figcaption", { style: "font-size:11px;color:#57606a" }, top.caption || "")));
      box.append(el("div", { class: "actviz-detail", style: "display:flex;gap:12px" },
        detail.uri ? el("img", { src: detail.uri, width: String(detail.width || 256),
                    style: "image-rendering:pixelated;border:1px solid #eee" }) : null,
        el("div", {}, el("div", { style: "font-weight:600" }, detail.title || ""),
           statsTable(detail.stats), tops.length ? el("div", {}, "top images") : null,
           ...tops)));
    }
    root.setAttribute("data-actviz-ready", String(layers.length));
  }

  for (const name of ["layers", "layer", "channels", "channel", "detail", "message"]) {
    model.on(`change:${name}`, draw);
  }
  draw();
}

export default { render };
