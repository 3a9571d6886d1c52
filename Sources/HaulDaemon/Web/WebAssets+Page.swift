/// The web UI's page: plain HTML, no build step, no third-party code.
extension WebAssets {
    static let indexHTML = #"""
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Haul</title>
<link rel="stylesheet" href="/app.css">
</head>
<body>
<header>
  <h1>Haul</h1>
  <nav role="tablist">
    <button id="tab-downloading" role="tab" class="tab active" aria-selected="true">Downloading <span class="count" id="count-downloading">0</span></button>
    <button id="tab-finished" role="tab" class="tab" aria-selected="false">Finished <span class="count" id="count-finished">0</span></button>
  </nav>
  <button id="add-button" class="primary">+ Add</button>
</header>
<div id="banner" class="banner" hidden></div>
<main>
  <div class="toolbar">
    <input id="search" type="search" placeholder="Search name or URL" aria-label="Search by name or URL">
    <select id="state-filter" aria-label="Filter by state"></select>
  </div>
  <div class="selection">
    <label class="pick-page"><input type="checkbox" id="select-page"> Page</label>
    <span id="selected-count" class="muted">none selected</span>
    <span class="selection-actions">
      <button id="selected-pause" disabled>Pause</button><button id="selected-resume" disabled>Resume</button><button id="selected-remove" disabled>Remove</button><button id="selected-clear" disabled>Clear</button>
    </span>
  </div>
  <p class="empty" id="empty" hidden></p>
  <ul class="list" id="list" aria-live="polite"></ul>
  <div class="pager">
    <button id="page-prev" aria-label="Previous page">&lsaquo; Prev</button>
    <span id="page-info" class="muted"></span>
    <button id="page-next" aria-label="Next page">Next &rsaquo;</button>
  </div>
  <div class="bulk" id="bulk-downloading"><button id="pause-all">Pause all</button><button id="resume-all">Resume all</button></div>
  <div class="bulk" id="bulk-finished" hidden><button id="purge">Clear finished</button></div>
</main>
<footer id="status">connecting…</footer>
<dialog id="add-dialog">
  <form id="add-form" method="dialog">
    <h2>Add downloads</h2>
    <label>URLs, one per line<textarea id="add-urls" rows="4" required placeholder="https://example.org/file.iso"></textarea></label>
    <label>Save to directory<input id="add-dir" type="text" placeholder="default directory"></label>
    <label>Checksum (optional, single URL)<input id="add-checksum" type="text" placeholder="sha256=…"></label>
    <label>Speed limit (optional)<input id="add-limit" type="text" placeholder="e.g. 500K or 2M"></label>
    <p id="add-error" class="error" hidden></p>
    <div class="actions">
      <button type="button" id="add-cancel">Cancel</button>
      <button type="submit" id="add-submit" class="primary">Add</button>
    </div>
  </form>
</dialog>
<dialog id="limit-dialog">
  <form id="limit-form" method="dialog">
    <h2 id="limit-title">Speed limit</h2>
    <label>Bytes per second, e.g. 500K or 2M; empty for none<input id="limit-value" type="text" autocomplete="off"></label>
    <p id="limit-error" class="error" hidden></p>
    <div class="actions">
      <button type="button" id="limit-cancel">Cancel</button>
      <button type="submit" id="limit-submit" class="primary">Set</button>
    </div>
  </form>
</dialog>
<template id="row-template">
  <li class="row">
    <input type="checkbox" class="pick" aria-label="Select">
    <div class="body">
      <div class="line1"><span class="name"></span><span class="state"></span></div>
      <div class="bar"><div class="fill"></div></div>
      <div class="line2"><span class="bytes"></span><span class="speed"></span><span class="eta"></span><span class="limit"></span></div>
      <div class="message"></div>
    </div>
    <div class="buttons">
      <button class="pause">Pause</button><button class="resume">Resume</button><button class="set-limit" title="Speed limit">Limit</button><button class="cancel">Cancel</button><button class="remove">Remove</button>
    </div>
  </li>
</template>
<script src="/app.js"></script>
</body>
</html>
"""#
}
