// Flame graph interaction, embedded in the SVG by svg.go after a line
// that sets fg = {width, pad, charWidth, textY, icicle}.
// Click a frame to zoom into it, click the root or "Reset Zoom" (or press
// Escape) to zoom out; "Search" (or Ctrl-F) highlights frames matching a
// regular expression and shows the share of samples they cover.
(function () {
  'use strict';
  var NS = 'http://www.w3.org/2000/svg';
  var full = fg.width - 2 * fg.pad;
  var eps = 0.005;
  var frames = [];
  var groups = document.getElementById('frames').children;
  for (var i = 0; i < groups.length; i++) {
    var g = groups[i];
    var r = g.querySelector('rect');
    var f = {
      g: g, rect: r, text: g.querySelector('text'),
      tip: g.querySelector('title').textContent,
      x: +r.getAttribute('x'), w: +r.getAttribute('width'), y: +r.getAttribute('y')
    };
    f.name = f.tip.split('\n')[0];
    f.chars = Array.from(f.name); // code points, as svg.go counts them
    g.fgIndex = i;
    frames.push(f);
  }
  var details = document.getElementById('details');
  var matched = document.getElementById('matched');
  var unzoomButton = document.getElementById('unzoom');
  var searchButton = document.getElementById('search');
  var pattern = null;

  // label shortens a frame's name to fit w pixels, as svg.go does.
  function label(f, x, w) {
    var fit = Math.floor((w - 6) / fg.charWidth);
    var s = '';
    if (fit >= 1 && f.chars.length <= fit) {
      s = f.name;
    } else if (fit >= 5) {
      s = f.chars.slice(0, fit - 2).join('') + '..';
    }
    if (!f.text) {
      if (!s) return;
      f.text = document.createElementNS(NS, 'text');
      f.text.setAttribute('y', f.y + fg.textY);
      f.g.appendChild(f.text);
    }
    f.text.setAttribute('x', (x + 3).toFixed(2));
    f.text.textContent = s;
  }

  function place(f, x, w, parent) {
    f.g.classList.remove('hide');
    f.g.classList.toggle('p', parent);
    f.rect.setAttribute('x', x.toFixed(2));
    f.rect.setAttribute('width', w.toFixed(2));
    label(f, x, w);
  }

  // callerSide says whether frame f sits on the root's side of z.
  function callerSide(f, z) {
    return fg.icicle ? f.y < z.y : f.y > z.y;
  }

  function zoom(z) {
    var scale = full / z.w;
    frames.forEach(function (f) {
      if (callerSide(f, z)) {
        if (f.x <= z.x + eps && f.x + f.w >= z.x + z.w - eps) {
          place(f, fg.pad, full, true); // a caller: stretched, dimmed
        } else {
          f.g.classList.add('hide');
        }
      } else if (f.x >= z.x - eps && f.x + f.w <= z.x + z.w + eps) {
        place(f, fg.pad + (f.x - z.x) * scale, f.w * scale, false);
      } else {
        f.g.classList.add('hide');
      }
    });
    unzoomButton.classList.remove('hide');
  }

  function unzoom() {
    frames.forEach(function (f) { place(f, f.x, f.w, false); });
    unzoomButton.classList.add('hide');
  }

  // search highlights the frames whose names match re (none when re is
  // null) and reports the share of the root's width they cover: the union
  // of their spans, since a frame's span holds the spans of its callees.
  function search(re) {
    pattern = re;
    var spans = [];
    frames.forEach(function (f) {
      var hit = re !== null && re.test(f.name);
      f.g.classList.toggle('m', hit);
      if (hit) spans.push([f.x, f.x + f.w]);
    });
    if (re === null) {
      matched.textContent = '';
      searchButton.textContent = 'Search';
      return;
    }
    spans.sort(function (a, b) { return a[0] - b[0]; });
    var covered = 0, end = -Infinity;
    spans.forEach(function (s) {
      if (s[1] > end) {
        covered += s[1] - Math.max(s[0], end);
        end = s[1];
      }
    });
    matched.textContent = 'Matched: ' + (100 * covered / full).toFixed(2) + '% (' +
      spans.length + (spans.length === 1 ? ' frame' : ' frames') + ' matching /' + re.source + '/)';
    searchButton.textContent = 'Clear Search';
  }

  function askSearch() {
    var s = window.prompt('Highlight frames matching (regular expression):', pattern ? pattern.source : '');
    if (s === null) return;
    if (s === '') { search(null); return; }
    var re;
    try {
      re = new RegExp(s);
    } catch (e) {
      re = new RegExp(s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')); // not a regexp: match it literally
    }
    search(re);
  }

  function frameOf(e) {
    var g = e.target.closest && e.target.closest('#frames > g');
    return g ? frames[g.fgIndex] : null;
  }

  var root = document.getElementById('frames');
  root.addEventListener('click', function (e) {
    var f = frameOf(e);
    if (!f) return;
    if (f === frames[0]) {
      unzoom(); // the root
      return;
    }
    zoom(f);
  });
  root.addEventListener('mouseover', function (e) {
    var f = frameOf(e);
    if (f) details.textContent = f.tip.split('\n').join('  |  ');
  });
  root.addEventListener('mouseout', function () { details.textContent = ' '; });
  unzoomButton.addEventListener('click', unzoom);
  searchButton.addEventListener('click', function () {
    if (pattern) search(null); else askSearch();
  });
  document.addEventListener('keydown', function (e) {
    if ((e.ctrlKey || e.metaKey) && (e.key === 'f' || e.key === 'F')) {
      e.preventDefault();
      askSearch();
    } else if (e.key === 'Escape') {
      unzoom();
      search(null);
    }
  });
})();
