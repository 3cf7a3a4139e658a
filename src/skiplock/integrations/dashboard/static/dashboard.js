/* skiplock dashboard: live regions (docs/dashboard-pages.md, "Live").

   Progressive: every page works without this script. A page opts in by marking regions
   with data-live="<name>" inside <main data-refresh="<seconds>">. Every <seconds> the
   script fetches the page's own address again (the same authorization, the same reads)
   and swaps each region for the fetched page's region of the same name. What the
   operator is doing is kept: ticked boxes and typed values move to the new region, the
   focus too (unless its item is gone); a region is held (not swapped) while a
   confirmation box is open in it, while text is selected in it, or while a ticked box
   or a typed value would have no place in the new region (the job changed state). The pause button stops the
   refreshing, for every page of the dashboard (kept in localStorage). No other file, no
   inline script: the page's Content-Security-Policy allows script-src 'self' only. */
(function () {
  "use strict";
  var main = document.querySelector("main[data-refresh]");
  var bar = document.querySelector("[data-live-bar]");
  if (!main || !bar || !main.querySelector("[data-live]") || !window.fetch) return;
  var every = Math.max(1, Number(main.getAttribute("data-refresh")) || 10) * 1000;
  var KEY = "skiplock.dashboard.live";
  var status = bar.querySelector("[data-live-status]");
  var toggle = bar.querySelector("[data-live-toggle]");
  var timer = null;
  var busy = false;
  var updates = 0;
  // The HTML each region had when last rendered by the server: an unchanged region is
  // not touched (no churn, the focus and the boxes stay as they are).
  var served = {};
  each(document.querySelectorAll("[data-live]"), function (region) {
    served[region.getAttribute("data-live")] = region.outerHTML;
  });

  function each(list, fn) { Array.prototype.forEach.call(list, fn); }

  function paused() {
    try { return window.localStorage.getItem(KEY) === "paused"; } catch (e) { return false; }
  }

  function setPaused(value) {
    try {
      if (value) window.localStorage.setItem(KEY, "paused");
      else window.localStorage.removeItem(KEY);
    } catch (e) { /* storage refused (private mode): the switch holds for this page */ }
    pausedHere = value;
  }
  var pausedHere = paused();

  function show(state, text) {
    bar.setAttribute("data-state", state);
    status.textContent = text;
    status.title = text;
    toggle.textContent = state === "paused" ? "Resume live updates" : "Pause";
    toggle.setAttribute("aria-pressed", state === "paused" ? "true" : "false");
  }

  function clock() {
    var now = new Date();
    function two(n) { return (n < 10 ? "0" : "") + n; }
    return two(now.getUTCHours()) + ":" + two(now.getUTCMinutes()) + ":" +
      two(now.getUTCSeconds()) + " UTC";
  }

  function live() {
    show("live", "Live: refreshes every " + every / 1000 + " s");
  }

  function schedule() {
    if (timer !== null) window.clearTimeout(timer);
    timer = pausedHere ? null : window.setTimeout(refresh, every);
  }

  /* What identifies a link, a button or a field across two renderings of a region, for
     the focus: its id, its test id, its name (and value, for a box), its address. */
  function keyOf(el) {
    if (el.id) return "#" + el.id;
    var testid = el.getAttribute("data-testid");
    if (testid) return "@" + testid;
    var name = fieldOf(el);
    if (name !== null) return name;
    if (el.tagName === "A") return "a:" + el.getAttribute("href");
    return null;
  }

  /* What identifies a field's value: its name, and a box's value (a job's box carries its
     state: a tick moves only to the same job in the same state). */
  function fieldOf(el) {
    var name = el.getAttribute("name");
    if (!name) return null;
    var box = el.type === "checkbox" || el.type === "radio";
    return el.tagName + ":" + name + (box ? "=" + el.value : "");
  }

  function index(root, by) {
    var found = {};
    each(root.querySelectorAll("input, select, textarea, button, a, summary"), function (el) {
      var key = by(el);
      if (key !== null && !(key in found)) found[key] = el;
    });
    return found;
  }

  function dirty(el) {
    if (el.type === "checkbox" || el.type === "radio") return el.checked !== el.defaultChecked;
    if (el.tagName === "SELECT") {
      return Array.prototype.some.call(el.options, function (o) { return o.selected !== o.defaultSelected; });
    }
    if (el.type === "hidden") return false;
    return el.value !== el.defaultValue;
  }

  function focusIn(region) {
    var focused = document.activeElement;
    return focused && focused !== document.body && region.contains(focused) ? focused : null;
  }

  /* Why ``region`` must not be swapped for ``fresh`` now (null: it may be). */
  function held(region, fresh) {
    if (region.querySelector("details[open]")) return "a confirmation is open";
    var selection = window.getSelection && window.getSelection();
    if (selection && !selection.isCollapsed && selection.rangeCount &&
        region.contains(selection.getRangeAt(0).commonAncestorContainer)) {
      return "text is selected";
    }
    var fields = index(fresh, fieldOf);
    var lost = null;
    each(region.querySelectorAll("input, select, textarea"), function (el) {
      if (lost === null && dirty(el) && !(fieldOf(el) in fields)) {
        lost = el.type === "checkbox" ? "a ticked job changed since; untick it to resume"
          : "a field you changed is gone from the new page";
      }
    });
    return lost;
  }

  /* ``fresh`` (already in this document) takes what the operator did in ``region``; the
     function returned puts the focus back, once ``fresh`` is in place. */
  function carry(region, fresh) {
    var fields = index(fresh, fieldOf);
    each(region.querySelectorAll("input, select, textarea"), function (el) {
      if (!dirty(el)) return;
      var twin = fields[fieldOf(el)];
      if (el.type === "checkbox" || el.type === "radio") twin.checked = el.checked;
      else if (el.tagName === "SELECT") {
        each(el.options, function (o, i) { if (twin.options[i]) twin.options[i].selected = o.selected; });
      } else twin.value = el.value;
    });
    var focused = focusIn(region);
    if (focused === null) return function () {};
    var key = keyOf(focused);
    var target = key === null ? undefined : index(fresh, keyOf)[key];
    return function () {
      // An item gone from the new region (its job left the list) takes the focus along.
      if (!target) return;
      target.focus({ preventScroll: true });
      if (typeof focused.selectionStart === "number" && typeof target.setSelectionRange === "function") {
        try { target.setSelectionRange(focused.selectionStart, focused.selectionEnd); } catch (e) { /* not text */ }
      }
    };
  }

  /* What identifies an element across two renderings, to keep it where it is on the
     screen: its tag, id and data attributes (a row's data-job, a reason's data-code),
     when no other element of the region has the same. */
  function anchors(region) {
    var found = {};
    each(region.querySelectorAll("*"), function (el) {
      var parts = [];
      each(el.attributes, function (a) {
        if (a.name === "id" || (a.name.indexOf("data-") === 0 && a.name !== "data-label")) {
          parts.push(a.name + "=" + a.value);
        }
      });
      if (!parts.length) return;
      var key = el.tagName + "[" + parts.join("][") + "]";
      found[key] = key in found ? null : el;
    });
    return found;
  }

  /* The first identified element of ``region`` whose top is on the screen, and where. */
  function anchorOf(region) {
    var box = region.getBoundingClientRect();
    if (box.bottom <= 0 || box.top >= window.innerHeight) return null;
    var found = anchors(region);
    for (var key in found) {
      var el = found[key];
      if (!el) continue;
      var top = el.getBoundingClientRect().top;
      if (top >= 0 && top < window.innerHeight) return { key: key, top: top };
    }
    return null;
  }

  /* Swaps ``region`` for ``fresh`` and scrolls so that what the operator looks at stays
     where it was: the anchor on the screen, or, for a region above the screen, what
     follows it (the page sets overflow-anchor: none, so the browser does not move it as
     well). */
  function replace(region, fresh) {
    var anchor = anchorOf(region);
    var box = region.getBoundingClientRect();
    region.replaceWith(fresh);
    if (anchor !== null) {
      var twin = anchors(fresh)[anchor.key];
      if (twin) window.scrollBy(0, twin.getBoundingClientRect().top - anchor.top);
    } else if (box.bottom <= 0) {
      window.scrollBy(0, fresh.getBoundingClientRect().height - box.height);
    }
  }

  function swap(doc) {
    var holds = [];
    each(document.querySelectorAll("[data-live]"), function (region) {
      var name = region.getAttribute("data-live");
      var incoming = doc.querySelector('[data-live="' + name + '"]');
      if (!incoming) return;  // gone from the page: left as it was
      var html = incoming.outerHTML;
      if (served[name] === html) return;
      var fresh = document.importNode(incoming, true);
      var why = held(region, fresh);
      if (why !== null) { holds.push(why); return; }
      var refocus = carry(region, fresh);
      replace(region, fresh);
      served[name] = html;
      refocus();
    });
    return holds;
  }

  function refresh() {
    timer = null;
    if (pausedHere || busy) return;
    if (document.hidden) return;  // visibilitychange starts again
    busy = true;
    bar.setAttribute("aria-busy", "true");
    window.fetch(window.location.href, {
      credentials: "same-origin",
      cache: "no-store",
      headers: { "X-Skiplock-Live": "1" }
    }).then(function (response) {
      var type = response.headers.get("content-type") || "";
      if (!response.ok || type.indexOf("text/html") !== 0) {
        throw new Error(response.status + " " + response.statusText);
      }
      return response.text();
    }).then(function (text) {
      if (pausedHere) return;
      var doc = new DOMParser().parseFromString(text, "text/html");
      var holds = swap(doc);
      updates += 1;
      bar.setAttribute("data-updates", String(updates));
      bar.setAttribute("data-updated", clock());
      if (holds.length) show("held", "Held: " + holds[0] + " · updated " + clock());
      else show("live", "Live: refreshes every " + every / 1000 + " s · updated " + clock());
    }).catch(function (error) {
      if (!pausedHere) show("error", "Update failed (" + error.message + "); trying again in " + every / 1000 + " s");
    }).then(function () {
      busy = false;
      bar.removeAttribute("aria-busy");
      schedule();
    });
  }

  toggle.addEventListener("click", function () {
    setPaused(!pausedHere);
    if (pausedHere) { show("paused", "Paused: this page is as of " + bar.getAttribute("data-updated")); schedule(); }
    else { live(); refresh(); }
  });
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && !pausedHere && timer === null && !busy) refresh();
  });
  window.addEventListener("storage", function (event) {
    // The switch flipped in another tab of the dashboard.
    if (event.key !== KEY) return;
    var now = paused();
    if (now === pausedHere) return;
    pausedHere = now;
    if (now) { show("paused", "Paused"); schedule(); } else { live(); refresh(); }
  });

  bar.setAttribute("data-updated", clock());
  bar.setAttribute("data-updates", "0");
  bar.hidden = false;
  if (pausedHere) show("paused", "Paused");
  else live();
  schedule();
})();
