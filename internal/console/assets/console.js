// Live updates: every few seconds the page's <main> is fetched again (the
// server renders only it when asked with X-Console-Fragment) and swapped in.
(function () {
  "use strict";
  var body = document.body;
  if (body.dataset.live !== "true") return;
  var box = document.getElementById("live");
  var stamp = document.getElementById("updated");
  var every = 3000;
  function refresh() {
    if (!box || !box.checked || document.hidden) return schedule();
    fetch(location.href, { headers: { "X-Console-Fragment": "1" }, cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        document.getElementById("main").innerHTML = html;
        var n = Number(stamp.dataset.refreshes || 0) + 1;
        stamp.dataset.refreshes = String(n);
        stamp.textContent = "updated " + new Date().toISOString().replace("T", " ").slice(0, 19) + "Z";
      })
      .catch(function (e) { stamp.textContent = "update failed: " + e.message; })
      .then(schedule);
  }
  // A page that has finished what it followed (a lab run) says so with
  // data-live-stop: its forms are then left alone.
  function schedule() {
    if (document.querySelector("#main [data-live-stop]")) { if (box) box.checked = false; return; }
    setTimeout(refresh, every);
  }
  schedule();
})();
