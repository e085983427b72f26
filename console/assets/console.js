// a2-store console: the one script of its own. No inline script anywhere;
// this file only pauses and resumes the overview's timed refresh.
(function () {
  'use strict';

  function paused() {
    return document.body !== null && document.body.hasAttribute('data-refresh-paused');
  }

  // htmx asks before each request: a refreshing element's poll is cancelled while paused.
  document.addEventListener('htmx:beforeRequest', function (event) {
    var elt = event.detail && event.detail.elt;
    if (paused() && elt && elt.hasAttribute && elt.hasAttribute('data-refresh')) {
      event.preventDefault();
    }
  });

  document.addEventListener('click', function (event) {
    var target = event.target;
    var button = target && target.closest ? target.closest('[data-refresh-toggle]') : null;
    if (!button) {
      return;
    }
    var body = document.body;
    if (paused()) {
      body.removeAttribute('data-refresh-paused');
      button.textContent = 'Pause refresh';
      button.setAttribute('aria-pressed', 'false');
    } else {
      body.setAttribute('data-refresh-paused', '');
      button.textContent = 'Resume refresh';
      button.setAttribute('aria-pressed', 'true');
    }
  });
})();
