// Card form enhancements: a live Luhn check, MM/YY help, the countdown to best_before.
// The form works without this file; the server checks everything again.
(function () {
  "use strict";

  function luhnValid(digits) {
    if (!/^[0-9]{12,19}$/.test(digits)) {
      return false;
    }
    var sum = 0;
    for (var i = 0; i < digits.length; i += 1) {
      var digit = digits.charCodeAt(digits.length - 1 - i) - 48;
      if (i % 2 === 1) {
        digit *= 2;
        if (digit > 9) {
          digit -= 9;
        }
      }
      sum += digit;
    }
    return sum % 10 === 0;
  }

  function setupLuhn() {
    var input = document.getElementById("pan");
    var hint = document.getElementById("pan-hint");
    if (!input || !hint) {
      return;
    }
    var message = hint.getAttribute("data-invalid") || "";
    function check(final) {
      var digits = input.value.replace(/[\s-]/g, "");
      var bad = digits.length > 0 && !luhnValid(digits) && (final || digits.length >= 16);
      if (bad) {
        input.setAttribute("aria-invalid", "true");
        hint.textContent = message;
        hint.classList.add("pp-hint--invalid");
      } else {
        input.removeAttribute("aria-invalid");
        if (hint.classList.contains("pp-hint--invalid")) {
          hint.textContent = "";
          hint.classList.remove("pp-hint--invalid");
        }
      }
    }
    input.addEventListener("input", function () { check(false); });
    input.addEventListener("blur", function () { check(true); });
    // The customer may have typed before this deferred script ran.
    check(false);
  }

  function setupExpiry() {
    var input = document.getElementById("expiry");
    if (!input) {
      return;
    }
    input.addEventListener("input", function (event) {
      if (event.inputType && event.inputType.indexOf("delete") === 0) {
        return;
      }
      if (/^[0-9]{2}$/.test(input.value)) {
        input.value = input.value + "/";
      }
    });
  }

  function pad(value) {
    return value < 10 ? "0" + value : String(value);
  }

  function setupCountdown() {
    var box = document.getElementById("pp-countdown");
    if (!box) {
      return;
    }
    var deadline = Date.parse(box.getAttribute("data-deadline") || "");
    var output = box.querySelector("time");
    if (isNaN(deadline) || !output) {
      return;
    }
    var pay = document.getElementById("pp-pay");
    var timer = null;
    function tick() {
      var left = Math.max(0, Math.floor((deadline - Date.now()) / 1000));
      var hours = Math.floor(left / 3600);
      var minutes = Math.floor((left % 3600) / 60);
      var seconds = left % 60;
      output.textContent = (hours > 0 ? hours + ":" + pad(minutes) : String(minutes)) + ":" + pad(seconds);
      if (left === 0) {
        box.classList.add("pp-timer--expired");
        box.textContent = box.getAttribute("data-expired") || "";
        if (pay) {
          pay.disabled = true;
        }
        if (timer !== null) {
          window.clearInterval(timer);
        }
      }
    }
    tick();
    timer = window.setInterval(tick, 1000);
  }

  function setupSubmit() {
    var form = document.querySelector(".pp-form");
    var pay = document.getElementById("pp-pay");
    if (!form || !pay) {
      return;
    }
    form.addEventListener("submit", function () {
      // One submission per click; the server ignores doubles anyway.
      window.setTimeout(function () { pay.disabled = true; }, 0);
    });
  }

  setupLuhn();
  setupExpiry();
  setupCountdown();
  setupSubmit();
})();
