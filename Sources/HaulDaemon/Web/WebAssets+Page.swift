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
    <button id="tab-downloading" role="tab" class="tab active" data-view="downloading">Downloading <span class="count" id="count-downloading">0</span></button>
    <button id="tab-finished" role="tab" class="tab" data-view="finished">Finished <span class="count" id="count-finished">0</span></button>
  </nav>
  <button id="add-button" class="primary">+ Add</button>
</header>
<div id="banner" class="banner" hidden></div>
<main>
  <section id="view-downloading" class="view" aria-labelledby="tab-downloading">
    <p class="empty" id="empty-downloading">Nothing downloading. Add a URL to start.</p>
    <ul class="list" id="list-downloading"></ul>
    <div class="bulk"><button id="pause-all">Pause all</button><button id="resume-all">Resume all</button></div>
  </section>
  <section id="view-finished" class="view" aria-labelledby="tab-finished" hidden>
    <p class="empty" id="empty-finished">No finished downloads yet.</p>
    <ul class="list" id="list-finished"></ul>
    <div class="bulk"><button id="purge">Clear finished</button></div>
  </section>
</main>
<footer id="status">connecting…</footer>
<dialog id="add-dialog">
  <form id="add-form" method="dialog">
    <h2>Add downloads</h2>
    <label>URLs, one per line<textarea id="add-urls" rows="4" required placeholder="https://example.org/file.iso"></textarea></label>
    <label>Save to directory<input id="add-dir" type="text" placeholder="default directory"></label>
    <label>Checksum (optional, single URL)<input id="add-checksum" type="text" placeholder="sha256=…"></label>
    <p id="add-error" class="error" hidden></p>
    <div class="actions">
      <button type="button" id="add-cancel">Cancel</button>
      <button type="submit" id="add-submit" class="primary">Add</button>
    </div>
  </form>
</dialog>
<template id="row-template">
  <li class="row">
    <div class="line1"><span class="name"></span><span class="state"></span></div>
    <div class="bar"><div class="fill"></div></div>
    <div class="line2"><span class="bytes"></span><span class="speed"></span><span class="eta"></span></div>
    <div class="message"></div>
    <div class="buttons">
      <button class="pause">Pause</button><button class="resume">Resume</button>
      <button class="cancel">Cancel</button><button class="remove">Remove</button>
    </div>
  </li>
</template>
<script src="/app.js"></script>
</body>
</html>
"""#
}
