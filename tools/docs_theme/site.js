/* minbert_nb offline docs (copied to _site/assets/site.js by tools/docs.py): the sidebar's Menu button on narrow screens,
   "on this page" folded on narrow screens, copy buttons on code cells, and search over assets/search-index.js (built by
   `make docs`: every page's text split at its headings; nothing is fetched from the web). */
(() => {
  const $ = (s, r = document) => r.querySelector(s), $$ = (s, r = document) => Array.from(r.querySelectorAll(s));
  const esc = s => s.replace(/[&<>"]/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c]));

  // ---- sidebar: a Menu button folds it on narrow screens ----
  const nav = $('.sidebar'), btn = nav && $('.menu-toggle', nav);
  if (btn) btn.addEventListener('click', () => { const o = nav.classList.toggle('open'); btn.setAttribute('aria-expanded', String(o)); });

  // ---- "on this page": open beside the page on wide screens, folded above it on narrow ones ----
  const toc = $('.page-toc');
  if (toc && window.matchMedia('(max-width: 1399px)').matches) toc.open = false;

  // ---- copy buttons on code cells and code blocks ----
  const copy = text => navigator.clipboard && window.isSecureContext ? navigator.clipboard.writeText(text) : new Promise((ok, no) => {
    const t = document.createElement('textarea'); t.value = text; t.style.position = 'fixed'; t.style.opacity = '0';
    document.body.appendChild(t); t.select(); try { document.execCommand('copy') ? ok() : no(); } catch (e) { no(e); } t.remove(); });
  $$('.jp-InputArea .highlight, .jp-MarkdownCell .highlight').forEach(box => {
    const pre = $('pre', box); if (!pre) return;
    const b = document.createElement('button'); b.type = 'button'; b.className = 'copy-button'; b.textContent = 'Copy';
    b.setAttribute('aria-label', 'Copy this code');
    b.addEventListener('click', () => copy(pre.innerText.replace(/\n$/, '')).then(
      () => { b.textContent = 'Copied'; setTimeout(() => b.textContent = 'Copy', 1500); },
      () => { b.textContent = 'Press Ctrl+C'; }));
    box.classList.add('has-copy'); box.appendChild(b);
  });

  // ---- search ----
  const terms = q => q.toLowerCase().split(/[^\p{L}\p{N}_.-]+/u).filter(t => t.length > 0);
  const count = (x, t) => { let n = 0, i = x.indexOf(t); while (i >= 0 && n < 20) { n++; i = x.indexOf(t, i + t.length); } return n; };
  function search(q, index) {
    const ts = terms(q); if (!ts.length) return [];
    const phrase = ts.join(' '), pages = [];
    for (const p of index) {
      const head = (p.t + ' ' + p.d).toLowerCase(), hits = [];
      for (const [h, id, text] of p.s) {
        const hh = h.toLowerCase(), x = text.toLowerCase();
        let score = 0, ok = true;
        for (const t of ts) {
          const a = head.includes(t), b = hh.includes(t), n = count(x, t);
          if (!a && !b && !n) { ok = false; break; }
          score += (a ? 8 : 0) + (b ? 5 : 0) + Math.min(n, 6);
        }
        if (!ok) continue;
        if (ts.length > 1) score += (head.includes(phrase) ? 30 : 0) + (hh.includes(phrase) ? 15 : 0) + Math.min(count(x, phrase), 5) * 4;
        hits.push({h, id, text, score});
      }
      if (!hits.length) continue;
      hits.sort((a, b) => b.score - a.score);
      pages.push({p, hits: hits.slice(0, 3), score: hits[0].score + 0.5 * Math.min(hits.length - 1, 6)});
    }
    return pages.sort((a, b) => b.score - a.score);
  }
  function snippet(text, q) {
    const ts = terms(q), x = text.toLowerCase(); let i = -1;
    for (const t of [ts.join(' '), ...ts]) { i = x.indexOf(t); if (i >= 0) break; }
    const a = Math.max(0, i - 70), s = (a ? '…' : '') + text.slice(a, a + 200) + (a + 200 < text.length ? '…' : '');
    let out = esc(s);
    for (const t of ts) out = out.replace(new RegExp('(' + t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + ')', 'gi'), '<mark>$1</mark>');
    return out;
  }
  const link = (p, hit) => p.u + (hit && hit.id ? '#' + hit.id : '');
  function withIndex(cb) {
    if (window.MINBERT_SEARCH) return cb(window.MINBERT_SEARCH);
    let s = $('script[data-search-index]');
    if (!s) { s = document.createElement('script'); s.src = 'assets/search-index.js'; s.dataset.searchIndex = ''; document.head.appendChild(s); }
    s.addEventListener('load', () => cb(window.MINBERT_SEARCH || []));
  }
  // the sidebar's box: the best pages as one types; Enter opens the search page
  const box = $('#search-q'), live = $('.search-live');
  if (box && live) {
    let timer = 0;
    const show = () => withIndex(index => {
      const q = box.value.trim(); if (!q) { live.hidden = true; return; }
      const res = search(q, index).slice(0, 8);
      live.innerHTML = res.length ? '<ol>' + res.map(r => `<li><a href="${esc(link(r.p, r.hits[0]))}"><b>${esc(r.p.t)}</b>` +
        (r.hits[0].h && r.hits[0].h !== r.p.t ? `<small>${esc(r.hits[0].h)}</small>` : '') + '</a></li>').join('') +
        `</ol><a class="all" href="search.html?q=${encodeURIComponent(q)}">All results</a>` : '<p>No page matches.</p>';
      live.hidden = false;
    });
    box.addEventListener('focus', () => withIndex(() => {}), {once: true});
    box.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(show, 120); });
    document.addEventListener('click', e => { if (!e.target.closest('.search')) live.hidden = true; });
  }
  // the search page: search.html?q=...
  const page = $('#search-page');
  if (page) {
    const q = new URLSearchParams(location.search).get('q') || '';
    const input = $('input[name=q]', page); input.value = q; if (box) box.value = q;
    if (q.trim()) withIndex(index => {
      const res = search(q, index);
      $('.search-status', page).textContent = res.length ? `${res.length} page${res.length > 1 ? 's' : ''} for “${q}”` : `No page matches “${q}”.`;
      $('.search-results', page).innerHTML = res.map(r => `<li class="search-result" data-page="${esc(r.p.u)}"><a class="search-title" href="${esc(link(r.p, r.hits[0]))}">${esc(r.p.t)}</a>` +
        (r.p.g ? ` <span class="search-section">${esc(r.p.g)}</span>` : '') + '<ul>' + r.hits.map(h =>
          `<li><a href="${esc(link(r.p, h))}">${esc(h.h || r.p.t)}</a><p>${snippet(h.text || r.p.d, q)}</p></li>`).join('') + '</ul></li>').join('');
      page.dataset.searched = q;
    });
    else input.focus();
  }
})();
