/// The web UI's script: renders the queue from server-sent events and sends commands with the
/// token in a header (which a cross-site form or image cannot do).
extension WebAssets {
    static let appJS = #"""
"use strict";
(function () {
  const hashToken = new URLSearchParams(location.hash.slice(1)).get("token");
  if (hashToken) {
    sessionStorage.setItem("haul-token", hashToken);
    history.replaceState(null, "", location.pathname);
  }
  const token = sessionStorage.getItem("haul-token") || "";
  const $ = (id) => document.getElementById(id);
  const downloads = new Map();
  let settings = null;
  let view = "downloading";

  function banner(text) {
    const el = $("banner");
    el.textContent = text || "";
    el.hidden = !text;
  }

  if (!token) {
    banner("Open the address that 'haul ui' prints: it carries the access token.");
    $("status").textContent = "no access token";
    return;
  }

  async function api(method, path, body) {
    const response = await fetch(path, {
      method,
      headers: Object.assign({ "Authorization": "Bearer " + token }, body ? { "Content-Type": "application/json" } : {}),
      body: body ? JSON.stringify(body) : undefined,
      credentials: "omit",
    });
    const text = await response.text();
    let json = {};
    try { json = text ? JSON.parse(text) : {}; } catch (e) { json = { error: text }; }
    if (!response.ok) throw new Error(json.error || ("HTTP " + response.status));
    return json;
  }

  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  function size(bytes) {
    if (bytes == null) return "?";
    let value = bytes, unit = 0;
    while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
    return (unit === 0 ? value.toFixed(0) : value.toFixed(1)) + " " + units[unit];
  }
  function duration(seconds) {
    if (seconds == null || !isFinite(seconds)) return "";
    seconds = Math.round(seconds);
    if (seconds < 60) return seconds + "s";
    if (seconds < 3600) return Math.floor(seconds / 60) + "m " + (seconds % 60) + "s";
    return Math.floor(seconds / 3600) + "h " + Math.floor((seconds % 3600) / 60) + "m";
  }
  const inProgress = (state) => state === "waiting" || state === "active" || state === "paused";

  function render() {
    const lists = { downloading: $("list-downloading"), finished: $("list-finished") };
    const sorted = [...downloads.values()].sort((a, b) => a.id - b.id);
    const counts = { downloading: 0, finished: 0 };
    const wanted = { downloading: [], finished: [] };
    for (const d of sorted) {
      const where = inProgress(d.state) ? "downloading" : "finished";
      counts[where]++;
      wanted[where].push(d);
    }
    for (const where of ["downloading", "finished"]) {
      const list = lists[where];
      const keep = new Set(wanted[where].map((d) => String(d.id)));
      for (const row of [...list.children]) if (!keep.has(row.dataset.id)) row.remove();
      let previous = null;
      for (const d of wanted[where]) {
        let row = list.querySelector('[data-id="' + d.id + '"]');
        if (!row) {
          row = $("row-template").content.firstElementChild.cloneNode(true);
          row.dataset.id = d.id;
          row.querySelector(".pause").onclick = () => act(d.id, "pause");
          row.querySelector(".resume").onclick = () => act(d.id, "resume");
          row.querySelector(".cancel").onclick = () => act(d.id, "cancel");
          row.querySelector(".remove").onclick = () => act(d.id, "remove");
        }
        fill(row, d);
        const expectedPosition = previous ? previous.nextSibling : list.firstChild;
        if (row !== expectedPosition) list.insertBefore(row, expectedPosition);
        previous = row;
      }
      $("count-" + where).textContent = counts[where];
      $("empty-" + where).hidden = counts[where] > 0;
    }
  }

  function fill(row, d) {
    row.dataset.state = d.state;
    row.dataset.bytes = d.bytesDone;
    row.querySelector(".name").textContent = d.fileName || (d.urls && d.urls[0]) || ("#" + d.id);
    row.querySelector(".name").title = (d.urls && d.urls[0]) || "";
    row.querySelector(".state").textContent = d.state;
    const fraction = d.totalBytes ? Math.min(1, d.bytesDone / d.totalBytes) : (d.state === "complete" ? 1 : 0);
    row.querySelector(".fill").style.width = (fraction * 100).toFixed(1) + "%";
    row.querySelector(".bytes").textContent = size(d.bytesDone) + " / " + size(d.totalBytes) +
      (d.totalBytes ? "  (" + Math.floor(fraction * 100) + "%)" : "");
    const active = d.state === "active";
    row.querySelector(".speed").textContent = active && d.speed != null ? size(d.speed) + "/s" : "";
    row.querySelector(".eta").textContent = active && d.secondsRemaining != null ? "ETA " + duration(d.secondsRemaining) : "";
    row.querySelector(".message").textContent = d.state === "complete" ? "" : (d.errorMessage || "");
    if (d.state === "complete") row.querySelector(".line2 .eta").textContent = d.path || "";
    row.querySelector(".pause").hidden = !(d.state === "waiting" || d.state === "active");
    row.querySelector(".resume").hidden = !(d.state === "paused" || d.state === "error");
    row.querySelector(".resume").textContent = d.state === "error" ? "Retry" : "Resume";
    row.querySelector(".cancel").hidden = !inProgress(d.state);
    row.querySelector(".remove").hidden = inProgress(d.state);
  }

  async function act(id, action) {
    try {
      if (action === "remove") await api("DELETE", "/api/downloads/" + id);
      else await api("POST", "/api/downloads/" + id + "/" + action);
      banner("");
    } catch (error) {
      banner(error.message);
    }
  }

  function show(which) {
    view = which;
    for (const where of ["downloading", "finished"]) {
      $("view-" + where).hidden = where !== which;
      $("tab-" + where).classList.toggle("active", where === which);
      $("tab-" + where).setAttribute("aria-selected", String(where === which));
    }
  }
  $("tab-downloading").onclick = () => show("downloading");
  $("tab-finished").onclick = () => show("finished");
  $("pause-all").onclick = () => api("POST", "/api/pause-all").catch((e) => banner(e.message));
  $("resume-all").onclick = () => api("POST", "/api/resume-all").catch((e) => banner(e.message));
  $("purge").onclick = () => api("POST", "/api/purge").catch((e) => banner(e.message));

  const dialog = $("add-dialog");
  $("add-button").onclick = () => {
    $("add-error").hidden = true;
    if (settings) $("add-dir").placeholder = settings.defaultDirectory;
    dialog.showModal();
    $("add-urls").focus();
  };
  $("add-cancel").onclick = () => dialog.close();
  $("add-form").onsubmit = async (event) => {
    event.preventDefault();
    const urls = $("add-urls").value.split(/\s+/).map((s) => s.trim()).filter(Boolean);
    const body = { urls };
    if ($("add-dir").value.trim()) body.directory = $("add-dir").value.trim();
    if ($("add-checksum").value.trim()) body.checksum = $("add-checksum").value.trim();
    $("add-submit").disabled = true;
    try {
      const result = await api("POST", "/api/downloads", body);
      for (const d of result.downloads || []) downloads.set(d.id, d);
      render();
      $("add-urls").value = "";
      $("add-checksum").value = "";
      dialog.close();
      show("downloading");
    } catch (error) {
      $("add-error").textContent = error.message;
      $("add-error").hidden = false;
    } finally {
      $("add-submit").disabled = false;
    }
  };

  function connect() {
    const events = new EventSource("/api/events?token=" + encodeURIComponent(token));
    events.addEventListener("snapshot", (e) => {
      const data = JSON.parse(e.data);
      downloads.clear();
      for (const d of data.downloads) downloads.set(d.id, d);
      settings = data.settings;
      render();
      $("status").textContent = "live · " + (settings ? settings.maximumConcurrentDownloads + " at once" : "");
      banner("");
    });
    events.addEventListener("download", (e) => {
      const d = JSON.parse(e.data);
      downloads.set(d.id, d);
      render();
    });
    events.addEventListener("removed", (e) => {
      downloads.delete(JSON.parse(e.data).id);
      render();
    });
    events.addEventListener("settings", (e) => {
      settings = JSON.parse(e.data);
      $("status").textContent = "live · " + settings.maximumConcurrentDownloads + " at once";
    });
    events.onerror = () => {
      $("status").textContent = "reconnecting…";
    };
  }
  connect();
})();
"""#
}
