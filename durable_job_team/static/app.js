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
      if (!fresh) return;
      var said = document.getElementById('said');  // what the person's own act recorded: shown once, kept until they leave
      if (said && !fresh.querySelector('#said')) fresh.insertBefore(said, fresh.firstChild);
      main().replaceWith(fresh);
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
    if (s.phase && page && page.dataset.results && (s.resultsSha256 !== page.dataset.results || s.phase !== page.dataset.phase)) {
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
/* Passkeys (WebAuthn): register this device's for the signed-in principal, and sign a decision, cancel or reconcile with it.
   The server makes the act's record first (nothing recorded); the passkey signs its challenge; the form then carries
   the assertion, and the server records the act only if nothing changed since. Without a passkey the forms post as they are. */
(function () {
  if (!window.PublicKeyCredential || !navigator.credentials) return;
  function bytes(b64) {
    var s = atob(b64.replace(/-/g, '+').replace(/_/g, '/') + '==='.slice((b64.length + 3) % 4));
    var out = new Uint8Array(s.length);
    for (var i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out.buffer;
  }
  function b64(buf) {
    var s = '', a = new Uint8Array(buf);
    for (var i = 0; i < a.length; i++) s += String.fromCharCode(a[i]);
    return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  }
  function token() {
    var t = document.querySelector('input[name=csrftoken]');
    return t ? t.value : '';
  }
  function post(url, body) {
    return fetch(url, {method: 'POST', credentials: 'same-origin', body: JSON.stringify(body),
                       headers: {'Content-Type': 'application/json', 'x-csrftoken': token()}}).then(function (r) {
      return r.json().then(function (j) { if (!r.ok) { var e = new Error(j.error || r.status); e.body = j; throw e; } return j; });
    });
  }
  function say(text) {
    var p = document.getElementById('passkey-said');
    if (p) p.textContent = text;
  }
  // navigator.credentials.create/get with the server's timeout as a deadline of the page's own (an authenticator that
  // never answers, or a browser that waits for one that is not there, would otherwise leave the person waiting forever).
  // Its refusal when nothing answered in time, or the person cancelled, is marked `unanswered`, and `late` when the
  // deadline had passed: the browser's own timeout (the same) may end the request first, as a NotAllowedError.
  function ask(how, publicKey, ms) {
    var ctl = window.AbortController ? new AbortController() : null, timer = null, started = Date.now();
    var options = {publicKey: publicKey};
    if (ctl) {
      options.signal = ctl.signal;
      timer = setTimeout(function () { ctl.abort(); }, ms);
    }
    return navigator.credentials[how](options).then(function (cred) {
      clearTimeout(timer);
      if (!cred) throw unanswered(new Error('no passkey answered'), false);
      return cred;
    }, function (e) {
      clearTimeout(timer);
      var late = (ctl && ctl.signal.aborted) || Date.now() - started >= ms;
      if (e && (e.name === 'AbortError' || e.name === 'NotAllowedError' || e.name === 'TimeoutError')) throw unanswered(e, late);
      throw e;
    });
  }
  function unanswered(e, late) {
    var out = new Error(late ? 'no answer in the time allowed' : e.message);
    out.unanswered = true;
    out.late = late;
    return out;
  }
  function stuck(form) { return form.querySelector('.passkey-stuck'); }
  function unstick(form) {
    var panel = stuck(form);
    if (panel) panel.hidden = true;
  }
  // No passkey answered: say so beside the form's buttons, with the ways on (try again; another device; unsigned).
  function offer(form, button, s, e) {
    var panel = stuck(form);
    if (!panel) return false;
    var waited = Math.round((s.timeout || 0) / 1000);
    panel.querySelector('.passkey-why').textContent = e.late
      ? 'It waited ' + waited + ' seconds for your passkey.'
      : 'The request was cancelled or refused on this device.';
    var unsigned = panel.querySelector('.passkey-unsigned');
    unsigned.textContent = unsigned.dataset.label.replace('{decision}', button && button.value
      ? button.value.charAt(0).toUpperCase() + button.value.slice(1) : 'Decide');
    Array.prototype.forEach.call(panel.querySelectorAll('.passkey-unsigned-offer'), function (el) { el.hidden = !s.unsigned; });
    panel.querySelector('.passkey-retry').onclick = function () {
      panel.hidden = true;
      form.requestSubmit(button);
    };
    unsigned.onclick = function () {  // the form as it posts without a passkey: the server records the act unsigned
      panel.hidden = true;
      form.elements.challenge.value = ''; form.elements.passkey.value = '';
      form.dataset.signed = '1';
      say('Recording it unsigned…');
      form.requestSubmit(button);
    };
    panel.hidden = false;
    say('No passkey answered on this device: nothing was recorded.');
    panel.scrollIntoView({block: 'nearest'});
    return true;
  }
  document.addEventListener('click', function (ev) {
    var button = ev.target.closest && ev.target.closest('#passkey-register');
    if (!button) return;
    say('Asking this device for a passkey…');
    var challenge;
    post('/api/passkeys/options', {jobId: button.dataset.job}).then(function (o) {
      challenge = o.challenge;
      var options = {
        rp: o.rp, challenge: bytes(o.challenge), user: {id: bytes(o.user.id), name: o.user.name, displayName: o.user.displayName},
        pubKeyCredParams: o.pubKeyCredParams, timeout: o.timeout, attestation: o.attestation,
        authenticatorSelection: o.authenticatorSelection,
        excludeCredentials: (o.excludeCredentials || []).map(function (c) { return {type: c.type, id: bytes(c.id)}; })
      };
      return ask('create', options, o.timeout);
    }).then(function (cred) {
      var r = cred.response;
      return post('/api/passkeys', {challenge: challenge, credential: {
        id: cred.id, rawId: b64(cred.rawId), type: cred.type,
        response: {clientDataJSON: b64(r.clientDataJSON), attestationObject: b64(r.attestationObject),
                   transports: r.getTransports ? r.getTransports() : []}}});
    }).then(function () {
      location.reload();
    }).catch(function (e) {
      if (e.unanswered) say('No passkey answered on this device: nothing was registered. Tap “Register this device\'s passkey” to try again.');
      else say('No passkey was registered: ' + e.message);
    });
  });
  document.addEventListener('submit', function (ev) {
    var form = ev.target;
    if (!form.classList || !form.classList.contains('act-form') || form.dataset.sign !== 'passkey') return;
    if (form.dataset.signed === '1') return;  // signed: posts as it is
    ev.preventDefault();
    if (form.dataset.busy === '1') return;  // a second tap while the first is being signed
    form.dataset.busy = '1';
    var button = ev.submitter, f = form.elements;
    var body = {command: form.dataset.command, reviewer: f.reviewer.value, reason: f.reason.value,
                resultsSha256: f.resultsSha256 ? f.resultsSha256.value : ''};
    if (button && button.name === 'decision') body.decision = button.value;
    (form.dataset.fields || '').split(' ').forEach(function (n) { if (n && f[n]) body[n] = f[n].value; });  // a reconcile's own
    if (f.claims && f.claims.value) {  // each claim's check stands beside its quotes, in this form by its form attribute
      body.checked = Array.prototype.map.call(document.querySelectorAll('input[name="checked"][form="' + form.id + '"]:checked'),
                                              function (c) { return c.value; });
    }
    unstick(form);
    say('Sign with your passkey…');
    var asked = null;  // the server's sign options, once given
    post(form.dataset.signUrl, body).then(function (s) {
      if (s.recorded) return null;
      asked = s;
      var found = form.querySelector('.lookup-found'), kept = s.record && s.record.fromProvider;
      if (found && kept) {  // a lookup: what the provider holds, which the passkey signs (nothing recorded yet)
        found.textContent = 'The provider holds its answer, response ' + kept.responseId + ': your passkey signs taking it.';
        found.hidden = false;
      }
      return ask('get', {challenge: bytes(s.challenge), rpId: s.rpId, userVerification: 'required', timeout: s.timeout,
        allowCredentials: s.credentials.map(function (id) { return {type: 'public-key', id: bytes(id)}; })}, s.timeout).then(function (a) {
        var r = a.response;
        f.challenge.value = s.challenge;
        f.passkey.value = JSON.stringify({credentialId: b64(a.rawId), authenticatorData: b64(r.authenticatorData),
                                          clientDataJSON: b64(r.clientDataJSON), signature: b64(r.signature)});
      });
    }).then(function () {
      form.dataset.signed = '1';
      form.requestSubmit(button);
    }).catch(function (e) {
      form.dataset.busy = '';
      if (e.body && (e.body.stale || e.body.signedOut)) {  // the results changed, or the session ended: the form's own answer says so
        form.dataset.signed = '1';
        f.challenge.value = ''; f.passkey.value = '';
        form.requestSubmit(button);
        return;
      }
      if (e.unanswered && asked && offer(form, button, asked, e)) return;
      say('Not signed, nothing recorded: ' + e.message + '. Tap again to retry.');
    });
  });
})();
