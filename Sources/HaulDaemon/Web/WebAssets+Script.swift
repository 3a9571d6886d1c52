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
  const PAGE_SIZE = 100;
  const VIEWS = {
    downloading: ["waiting", "active", "paused"],
    finished: ["complete", "error", "removed"],
  };
  // Only the rows of the page on screen are kept: 10,000 queued downloads cost what 100 do.
  const rows = new Map();
  const selected = new Set();
  let settings = null;
  let counts = {};
  let view = "downloading";
  let stateFilter = "";
  let search = "";
  let offset = 0;
  let total = 0;

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
  const shown = (d) => VIEWS[view].includes(d.state) && (!stateFilter || d.state === stateFilter);

  // Asks for the page again; calls while one is under way fold into one more afterwards.
  let loading = false;
  let loadAgain = false;
  async function load() {
    if (loading) { loadAgain = true; return; }
    loading = true;
    try {
      const query = new URLSearchParams({ view, offset: String(offset), limit: String(PAGE_SIZE) });
      if (stateFilter) query.set("state", stateFilter);
      if (search) query.set("search", search);
      const data = await api("GET", "/api/downloads?" + query);
      if (data.downloads.length === 0 && offset > 0 && data.total > 0) {
        offset = Math.floor((data.total - 1) / PAGE_SIZE) * PAGE_SIZE;  // the page emptied: show the last one
        loadAgain = true;
      } else {
        rows.clear();
        for (const d of data.downloads) rows.set(d.id, d);
        total = data.total;
        counts = data.counts || counts;
        settings = data.settings || settings;
        render();
      }
    } catch (error) {
      banner(error.message);
    } finally {
      loading = false;
      if (loadAgain) { loadAgain = false; load(); }
    }
  }
  // A change that may move rows in or out of the page: ask again soon, at most once per delay.
  let reloadTimer = null;
  function reloadSoon(delay) {
    if (reloadTimer) return;
    reloadTimer = setTimeout(() => { reloadTimer = null; load(); }, delay);
  }

  function render() {
    const list = $("list");
    const existing = new Map();
    for (const row of list.children) existing.set(row.dataset.id, row);
    const ordered = [];
    for (const d of rows.values()) {
      let row = existing.get(String(d.id));
      if (row) existing.delete(String(d.id)); else row = makeRow(d.id);
      fill(row, d);
      ordered.push(row);
    }
    list.replaceChildren(...ordered);
    for (const where of Object.keys(VIEWS)) $("count-" + where).textContent = counts[where] || 0;
    const empty = $("empty");
    empty.hidden = rows.size > 0;
    empty.textContent = (search || stateFilter) ? "Nothing matches." :
      view === "downloading" ? "Nothing downloading. Add a URL to start." : "No finished downloads yet.";
    $("page-info").textContent = total === 0 ? "" :
      (offset + 1).toLocaleString() + "–" + (offset + rows.size).toLocaleString() + " of " + total.toLocaleString();
    $("page-prev").disabled = offset === 0;
    $("page-next").disabled = offset + PAGE_SIZE >= total;
    renderSelection();
    $("status").textContent = "live · " + (settings ? settings.maximumConcurrentDownloads + " at once" : "");
  }

  function makeRow(id) {
    const row = $("row-template").content.firstElementChild.cloneNode(true);
    row.dataset.id = id;
    row.querySelector(".pick").onchange = (event) => {
      if (event.target.checked) selected.add(id); else selected.delete(id);
      renderSelection();
    };
    row.querySelector(".pause").onclick = () => act(id, "pause");
    row.querySelector(".resume").onclick = () => act(id, "resume");
    row.querySelector(".cancel").onclick = () => act(id, "cancel");
    row.querySelector(".remove").onclick = () => act(id, "remove");
    row.querySelector(".set-limit").onclick = () => openLimit(id);
    return row;
  }

  function renderSelection() {
    const count = selected.size;
    $("selected-count").textContent = count === 0 ? "none selected" : count.toLocaleString() + " selected";
    for (const id of ["selected-pause", "selected-resume", "selected-remove", "selected-clear"]) $(id).disabled = count === 0;
    const onPage = [...rows.keys()];
    const picked = onPage.filter((id) => selected.has(id)).length;
    $("select-page").checked = onPage.length > 0 && picked === onPage.length;
    $("select-page").indeterminate = picked > 0 && picked < onPage.length;
    for (const row of $("list").children) row.querySelector(".pick").checked = selected.has(Number(row.dataset.id));
  }

  function fill(row, d) {
    row.dataset.state = d.state;
    row.dataset.bytes = d.bytesDone;
    row.querySelector(".name").textContent = d.fileCount ? ("List of " + d.fileCount + " files") : (d.fileName || (d.urls && d.urls[0]) || ("#" + d.id));
    row.querySelector(".name").title = (d.urls && d.urls[0]) || "";
    row.querySelector(".state").textContent = d.state;
    const fraction = d.totalBytes ? Math.min(1, d.bytesDone / d.totalBytes) : (d.state === "complete" ? 1 : 0);
    row.querySelector(".fill").style.width = (fraction * 100).toFixed(1) + "%";
    // A segmented download draws its map under the bar: one mark per range on disk.
    const bar = row.querySelector(".bar");
    let map = row.querySelector(".segments");
    if (d.segments && d.totalBytes && d.state !== "complete") {
      if (!map) { map = document.createElement("div"); map.className = "segments"; bar.after(map); }
      map.replaceChildren(...d.segments.map(([lower, upper]) => {
        const mark = document.createElement("span");
        mark.style.left = (lower / d.totalBytes * 100).toFixed(2) + "%";
        mark.style.width = ((upper - lower) / d.totalBytes * 100).toFixed(2) + "%";
        return mark;
      }));
      row.dataset.segments = d.segments.length;
    } else if (map) {
      map.remove();
      delete row.dataset.segments;
    }
    // Fetched from mirrors too: what each server contributed, and why one was dropped.
    let sources = row.querySelector(".sources");
    if (d.sources && d.sources.length > 1 && d.state === "active") {
      if (!sources) { sources = document.createElement("div"); sources.className = "sources"; (map || bar).after(sources); }
      sources.replaceChildren(...d.sources.map((source) => {
        const item = document.createElement("span");
        let host = source.url;
        try { host = new URL(source.url).host; } catch (e) {}
        item.textContent = (source.isPrimary ? "" : "mirror ") + host + " " +
          (source.dropped ? "dropped" : size(source.bytes) + (source.connections ? " ×" + source.connections : ""));
        item.title = source.dropped ? source.url + ": " + source.dropped : source.url;
        if (source.dropped) item.dataset.dropped = "1";
        return item;
      }));
      row.dataset.sources = d.sources.length;
    } else if (sources) {
      sources.remove();
      delete row.dataset.sources;
    }
    row.querySelector(".bytes").textContent = size(d.bytesDone) + " / " + size(d.totalBytes) +
      (d.totalBytes ? "  (" + Math.floor(fraction * 100) + "%)" : "");
    const active = d.state === "active";
    row.querySelector(".speed").textContent = active && d.speed != null ?
      size(d.speed) + "/s" + (d.connections > 1 ? " ×" + d.connections : "") : "";
    row.querySelector(".eta").textContent = active && d.secondsRemaining != null ? "ETA " + duration(d.secondsRemaining) : "";
    row.querySelector(".limit").textContent = d.speedLimit ? "≤ " + size(d.speedLimit) + "/s" : "";
    // A download that is running again shows no old error.
    // In a fleet, a running download says which daemon runs it.
    row.querySelector(".message").textContent = d.state === "complete" ? "" :
      active ? (d.runner ? "on " + d.runner : "") : (d.errorMessage || "");
    if (d.state === "complete") row.querySelector(".line2 .eta").textContent = d.path || "";
    row.querySelector(".pause").hidden = !(d.state === "waiting" || d.state === "active");
    row.querySelector(".resume").hidden = !(d.state === "paused" || d.state === "error");
    row.querySelector(".resume").textContent = d.state === "error" ? "Retry" : "Resume";
    row.querySelector(".set-limit").hidden = !inProgress(d.state);
    row.querySelector(".cancel").hidden = !inProgress(d.state);
    row.querySelector(".remove").hidden = inProgress(d.state);
  }

  async function act(id, action) {
    try {
      if (action === "remove") await api("DELETE", "/api/downloads/" + id);
      else await api("POST", "/api/downloads/" + id + "/" + action);
      banner("");
      reloadSoon(100);
    } catch (error) {
      banner(error.message);
    }
  }

  function fillStateFilter() {
    const select = $("state-filter");
    select.replaceChildren(new Option("All states", ""), ...VIEWS[view].map((state) => new Option(state, state)));
    select.value = stateFilter;
  }

  function show(which) {
    view = which;
    stateFilter = "";
    offset = 0;
    for (const where of Object.keys(VIEWS)) {
      $("tab-" + where).classList.toggle("active", where === which);
      $("tab-" + where).setAttribute("aria-selected", String(where === which));
      $("bulk-" + where).hidden = where !== which;
    }
    fillStateFilter();
    rows.clear();
    render();
    load();
  }
  $("tab-downloading").onclick = () => show("downloading");
  $("tab-finished").onclick = () => show("finished");
  $("state-filter").onchange = (event) => { stateFilter = event.target.value; offset = 0; load(); };
  let searchTimer = null;
  $("search").oninput = (event) => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => { search = event.target.value.trim(); offset = 0; load(); }, 200);
  };
  $("page-prev").onclick = () => { offset = Math.max(0, offset - PAGE_SIZE); load(); };
  $("page-next").onclick = () => { if (offset + PAGE_SIZE < total) { offset += PAGE_SIZE; load(); } };
  $("select-page").onchange = (event) => {
    for (const id of rows.keys()) { if (event.target.checked) selected.add(id); else selected.delete(id); }
    renderSelection();
  };
  async function actOnSelection(action) {
    const ids = [...selected];
    try {
      const result = await api("POST", "/api/selection/" + action, { ids });
      selected.clear();
      banner("");
      $("status").textContent = action + ": " + result.count + " of " + ids.length;
    } catch (error) {
      banner(error.message);
    }
    load();
  }
  $("selected-pause").onclick = () => actOnSelection("pause");
  $("selected-resume").onclick = () => actOnSelection("resume");
  $("selected-remove").onclick = () => actOnSelection("remove");
  $("selected-clear").onclick = () => { selected.clear(); renderSelection(); };
  $("pause-all").onclick = () => api("POST", "/api/pause-all").then(() => load()).catch((e) => banner(e.message));
  $("resume-all").onclick = () => api("POST", "/api/resume-all").then(() => load()).catch((e) => banner(e.message));
  $("purge").onclick = () => api("POST", "/api/purge").then(() => load()).catch((e) => banner(e.message));

  let limitID = null;
  function openLimit(id) {
    limitID = id;
    const d = rows.get(id);
    $("limit-title").textContent = "Speed limit of " + ((d && d.fileName) || ("#" + id));
    $("limit-value").value = d && d.speedLimit ? String(d.speedLimit) : "";
    $("limit-error").hidden = true;
    $("limit-dialog").showModal();
    $("limit-value").focus();
  }
  $("limit-cancel").onclick = () => $("limit-dialog").close();
  $("limit-form").onsubmit = async (event) => {
    event.preventDefault();
    try {
      const result = await api("POST", "/api/downloads/" + limitID + "/limit", { speedLimit: $("limit-value").value.trim() });
      if (rows.has(result.download.id)) { rows.set(result.download.id, result.download); render(); }
      $("limit-dialog").close();
    } catch (error) {
      $("limit-error").textContent = error.message;
      $("limit-error").hidden = false;
    }
  };

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
    if ($("add-limit").value.trim()) body.speedLimit = $("add-limit").value.trim();
    // Every URL is checked before any is sent: a bad one adds none.
    const bad = urls.find((text) => { try { return !/^https?:$/.test(new URL(text).protocol); } catch (e) { return true; } });
    if (bad !== undefined) {
      $("add-error").textContent = "not an http or https URL: " + bad;
      $("add-error").hidden = false;
      return;
    }
    // A long list goes in requests of at most ~900 KB (the API reads 1 MiB a request), in order;
    // one refused stops the rest, and the error says how many were added before it.
    const batches = [];
    let batch = [], length = 0;
    for (const url of urls) {
      const cost = JSON.stringify(url).length + 1;
      if (batch.length > 0 && length + cost > 900000) { batches.push(batch); batch = []; length = 0; }
      batch.push(url);
      length += cost;
    }
    batches.push(batch);
    $("add-submit").disabled = true;
    let added = 0;
    try {
      for (const part of batches) {
        try {
          await api("POST", "/api/downloads", Object.assign({}, body, { urls: part }));
        } catch (error) {
          if (added > 0) error.message += " (the first " + added + " of " + urls.length + " were added, the rest not)";
          throw error;
        }
        added += part.length;
      }
      $("add-urls").value = "";
      $("add-checksum").value = "";
      $("add-limit").value = "";
      dialog.close();
      if (view !== "downloading") show("downloading"); else load();
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
      counts = data.counts;
      settings = data.settings;
      banner("");
      load();
    });
    events.addEventListener("download", (e) => {
      const d = JSON.parse(e.data);
      const current = rows.get(d.id);
      if (current && current.state === d.state) {
        // Progress of a row on screen: update it in place.
        rows.set(d.id, d);
        const row = $("list").querySelector('[data-id="' + d.id + '"]');
        if (row) fill(row, d);
      } else if (current || shown(d)) {
        // A state change or a new download here: rows and counts move soon.
        if (current) { rows.set(d.id, d); render(); }
        reloadSoon(150);
      } else {
        reloadSoon(1000);  // elsewhere: only the counts may change
      }
    });
    events.addEventListener("removed", (e) => {
      const id = JSON.parse(e.data).id;
      selected.delete(id);
      if (rows.delete(id)) render();
      reloadSoon(150);
    });
    events.addEventListener("settings", (e) => {
      settings = JSON.parse(e.data);
      $("status").textContent = "live · " + settings.maximumConcurrentDownloads + " at once";
    });
    events.onerror = () => {
      $("status").textContent = "reconnecting…";
    };
  }
  fillStateFilter();
  connect();
})();
"""#
}
