// Waiting page: polls the payment's status and moves on when it is resolved.
// Without JavaScript a <noscript> meta refresh reloads the page instead.
(function () {
  "use strict";
  var box = document.getElementById("pp-waiting");
  if (!box || !window.fetch) {
    return;
  }
  var url = box.getAttribute("data-status-url");
  var current = box.getAttribute("data-status");
  var delay = 1000;

  function poll() {
    window.fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" })
      .then(function (response) {
        return response.ok ? response.json() : null;
      })
      .then(function (state) {
        if (state && state.status !== current && state.next) {
          window.location.assign(state.next);
          return;
        }
        delay = Math.min(delay * 1.5, 5000);
        window.setTimeout(poll, delay);
      })
      .catch(function () {
        delay = Math.min(delay * 2, 10000);
        window.setTimeout(poll, delay);
      });
  }

  window.setTimeout(poll, delay);
})();
