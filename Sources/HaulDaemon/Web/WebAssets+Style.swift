/// The web UI's style sheet: one column on a phone, roomier on a desktop.
extension WebAssets {
    static let appCSS = #"""
:root { --fg: #1d2330; --muted: #667085; --line: #e4e7ec; --accent: #2563eb; --ok: #15803d; --bad: #b42318; --bg: #f8fafc; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; flex-wrap: wrap; align-items: center; gap: .5rem 1rem; padding: .75rem 1rem; background: #fff; border-bottom: 1px solid var(--line); position: sticky; top: 0; z-index: 1; }
h1 { font-size: 1.2rem; margin: 0; }
nav { display: flex; gap: .25rem; flex: 1; }
button { font: inherit; padding: .4rem .8rem; border: 1px solid var(--line); border-radius: .4rem; background: #fff; color: var(--fg); cursor: pointer; min-height: 2.2rem; }
button:hover { border-color: var(--accent); }
button.primary { background: var(--accent); border-color: var(--accent); color: #fff; }
.tab { border: none; border-bottom: 2px solid transparent; border-radius: 0; background: none; }
.tab.active { border-bottom-color: var(--accent); color: var(--accent); font-weight: 600; }
.count { display: inline-block; min-width: 1.4em; padding: 0 .3em; border-radius: 1em; background: var(--line); color: var(--fg); font-size: .8em; text-align: center; }
main { max-width: 60rem; margin: 0 auto; padding: 1rem; }
.toolbar, .selection, .pager { display: flex; flex-wrap: wrap; align-items: center; gap: .4rem .6rem; margin-bottom: .5rem; }
.toolbar input[type="search"] { flex: 1; min-width: 10rem; width: auto; }
select { font: inherit; padding: .35rem .5rem; border: 1px solid var(--line); border-radius: .4rem; background: #fff; color: var(--fg); min-height: 2.2rem; }
.selection { font-size: .9rem; }
.selection-actions { display: flex; flex-wrap: wrap; gap: .3rem; margin-left: auto; }
.pick-page { display: flex; align-items: center; gap: .3rem; color: var(--fg); }
.muted { color: var(--muted); font-size: .85rem; font-variant-numeric: tabular-nums; }
.pager { justify-content: center; margin-top: .5rem; }
button:disabled { opacity: .45; cursor: default; border-color: var(--line); }
.list { list-style: none; margin: 0; padding: 0; background: #fff; border: 1px solid var(--line); border-radius: .5rem; }
.list:empty { display: none; }
.row { display: grid; grid-template-columns: auto minmax(0, 1fr) auto; align-items: center; gap: .2rem .6rem; padding: .35rem .6rem; border-top: 1px solid var(--line); }
.row:first-child { border-top: none; }
.row .pick { width: 1.1rem; height: 1.1rem; margin: 0; }
.body { display: grid; gap: .15rem; min-width: 0; }
.line1 { display: flex; justify-content: space-between; gap: .5rem; min-width: 0; }
.name { font-weight: 600; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; min-width: 0; }
.state { font-size: .72rem; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); white-space: nowrap; }
.row[data-state="active"] .state { color: var(--accent); }
.row[data-state="complete"] .state { color: var(--ok); }
.row[data-state="error"] .state, .message { color: var(--bad); }
.bar { height: .25rem; background: var(--line); border-radius: .2rem; overflow: hidden; }
.segments { position: relative; height: .2rem; margin-top: .15rem; background: var(--line); border-radius: .2rem; overflow: hidden; }
.segments span { position: absolute; top: 0; height: 100%; background: var(--accent); }
.row[data-state="paused"] .segments span { background: var(--muted); }
.sources { display: flex; flex-wrap: wrap; gap: .2rem .8rem; margin-top: .15rem; font-size: .75rem; color: var(--muted); }
.sources span[data-dropped] { text-decoration: line-through; }
.fill { height: 100%; width: 0; background: var(--accent); transition: width .25s; }
.row[data-state="complete"] .fill { background: var(--ok); }
.row[data-state="paused"] .fill { background: var(--muted); }
.line2 { display: flex; flex-wrap: wrap; gap: 0 .8rem; color: var(--muted); font-size: .8rem; font-variant-numeric: tabular-nums; min-width: 0; }
.line2 span { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; max-width: 100%; }
.message:empty { display: none; }
.message { font-size: .8rem; overflow-wrap: anywhere; }
.buttons { display: flex; flex-wrap: wrap; gap: .25rem; justify-content: flex-end; }
.buttons button { padding: .15rem .5rem; min-height: 1.8rem; font-size: .85rem; }
.buttons button[hidden] { display: none; }
.empty { color: var(--muted); text-align: center; padding: 2rem 0; }
.bulk { display: flex; gap: .5rem; justify-content: flex-end; margin-top: 1rem; }
.bulk[hidden] { display: none; }
.banner { background: #fef3f2; color: var(--bad); padding: .6rem 1rem; border-bottom: 1px solid #fecdca; }
footer { text-align: center; color: var(--muted); font-size: .8rem; padding: 1rem; }
dialog { border: none; border-radius: .6rem; padding: 0; width: min(34rem, 94vw); box-shadow: 0 10px 40px rgba(0,0,0,.25); }
dialog form { display: grid; gap: .7rem; padding: 1rem; }
dialog h2 { margin: 0; font-size: 1.1rem; }
label { display: grid; gap: .25rem; font-size: .9rem; color: var(--muted); }
input, textarea { font: inherit; padding: .45rem .55rem; border: 1px solid var(--line); border-radius: .4rem; color: var(--fg); width: 100%; }
.actions { display: flex; justify-content: flex-end; gap: .5rem; }
.error { color: var(--bad); margin: 0; overflow-wrap: anywhere; }
@media (max-width: 40rem) {
  header { padding: .6rem; }
  main { padding: .6rem; }
  .row { grid-template-columns: auto minmax(0, 1fr); }
  .buttons { grid-column: 2; justify-content: flex-start; }
  .selection-actions { margin-left: 0; }
}
"""#
}
