// Payplane Dashboard: confirmation dialogs. Every action also works without this script:
// the links lead to confirmation pages, and forms without "confirmed" get one from the server.
(function () {
  "use strict";

  function dialogById(id) {
    var dialog = id ? document.getElementById(id) : null;
    return dialog && typeof dialog.showModal === "function" ? dialog : null;
  }

  // A link with data-dialog opens that dialog instead of the confirmation page.
  document.querySelectorAll("a[data-dialog]").forEach(function (link) {
    link.addEventListener("click", function (event) {
      var dialog = dialogById(link.getAttribute("data-dialog"));
      if (!dialog) { return; }
      event.preventDefault();
      dialog.showModal();
    });
  });

  // A form with data-confirm asks in that dialog before it is sent, then sends confirmed=1.
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    var dialog = dialogById(form.getAttribute("data-confirm"));
    if (!dialog) { return; }
    form.addEventListener("submit", function (event) {
      if (form.getAttribute("data-confirmed") === "1") { return; }
      event.preventDefault();
      dialog.showModal();
    });
    dialog.querySelectorAll("[data-accept-dialog]").forEach(function (button) {
      button.addEventListener("click", function () {
        var flag = form.querySelector("input[name=confirmed]");
        if (flag) { flag.value = "1"; }
        form.setAttribute("data-confirmed", "1");
        dialog.close();
        form.submit();
      });
    });
  });

  document.querySelectorAll("[data-close-dialog]").forEach(function (button) {
    button.addEventListener("click", function () {
      var dialog = button.closest("dialog");
      if (dialog) { dialog.close(); }
    });
  });
})();
