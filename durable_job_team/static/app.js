/* The page's only script: it keeps the status line live (the acts are plain forms and work without it). */
(function () {
  var live = document.getElementById('live');
  if (!live || !window.EventSource) return;
  var state = document.getElementById('live-state'), detail = document.getElementById('live-detail');
  var since = null, first = true;
  function hhmmss(d) { return d.toTimeString().slice(0, 8); }
  function main() { return document.querySelector('main'); }
  function dirty() {
    return Array.prototype.some.call(document.querySelectorAll('main textarea'), function (t) { return t.value !== t.defaultValue; })
      || Array.prototype.some.call(document.querySelectorAll('main input[type=checkbox]'), function (c) { return c.checked !== c.defaultChecked; });
  }
  function swap() {
    var headers = {'Accept': 'text/html', 'X-Durable-Job-Refresh': '1'};  // a refresh, not the person's own use
    fetch(location.pathname + location.search, {credentials: 'same-origin', headers: headers}).then(function (r) {
      if (!r.ok) throw new Error(r.status);
      return r.text();
    }).then(function (html) {
      var fresh = new DOMParser().parseFromString(html, 'text/html').querySelector('main');
      if (fresh) main().replaceWith(fresh);
    }).catch(function () {});
  }
  var es = new EventSource(live.dataset.events);
  es.onopen = function () { since = null; };
  es.onmessage = function (m) {
    var s = JSON.parse(m.data), page = main();
    since = null;
    if (s.list) {
      if (!first) swap();
      first = false;
      state.textContent = 'Live';
      detail.textContent = s.detail || 'statuses update by themselves';
      live.className = 'live';
      return;
    }
    first = false;
    live.className = 'live ' + (s.cls || '');
    state.textContent = s.status;
    detail.textContent = s.detail || '';
    if (page && page.dataset.results && (s.resultsSha256 !== page.dataset.results || s.phase !== page.dataset.phase)) {
      if (page.dataset.phase !== 'awaiting-review' && !dirty()) swap();
      else document.getElementById('changed').hidden = false;
    }
  };
  es.addEventListener('refused', function (m) {
    es.close();
    live.className = 'live unknown';
    state.textContent = 'Not shown';
    detail.textContent = JSON.parse(m.data).error;
  });
  es.addEventListener('signed-out', function () {
    es.close();
    live.className = 'live unknown';
    state.textContent = 'Signed out';
    detail.innerHTML = '';
    var a = document.createElement('a');
    a.className = 'btn'; a.href = '/login?next=' + encodeURIComponent(location.pathname); a.textContent = 'Sign in again';
    detail.appendChild(a);
  });
  es.onerror = function () {
    if (!since) since = new Date();
    live.className = 'live unknown';
    state.textContent = 'Status unknown since ' + hhmmss(since);
    if (es.readyState === 2) {
      detail.innerHTML = '';
      var a = document.createElement('a');
      a.className = 'btn'; a.href = '/login?next=' + encodeURIComponent(location.pathname); a.textContent = 'Sign in again';
      detail.append('The server no longer knows this session (it restarted, or you were idle): ', a);
    } else {
      detail.textContent = 'The connection to the server was lost; reconnecting…';
    }
  };
})();
