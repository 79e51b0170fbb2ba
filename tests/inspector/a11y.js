// The accessibility check run in each view (see test_browser.py's docstring): returns the
// problems found, as strings; an empty list is a pass.
() => {
  const problems = [];
  const lum = (c) => {
    const m = c.match(/rgba?\(([^)]+)\)/); if (!m) return null;
    const p = m[1].split(',').map(s => parseFloat(s));
    const ch = p.slice(0, 3).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return {l: 0.2126 * ch[0] + 0.7152 * ch[1] + 0.0722 * ch[2], a: p.length > 3 ? p[3] : 1};
  };
  const background = (el) => {
    for (let e = el; e; e = e.parentElement) {
      const c = lum(getComputedStyle(e).backgroundColor);
      if (c && c.a > 0.5) return c.l;
    }
    return 1;  // the canvas: white
  };
  if (document.querySelectorAll('main').length !== 1) problems.push('no single <main>');
  if (document.querySelectorAll('h1').length !== 1) problems.push('not exactly one <h1>');
  if (!document.documentElement.lang) problems.push('no lang on <html>');
  if (!document.title) problems.push('no title');
  for (const input of document.querySelectorAll('input, select, textarea')) {
    if (input.type === 'hidden') continue;
    const named = input.getAttribute('aria-label') || (input.id && document.querySelector(`label[for="${input.id}"]`));
    if (!named) problems.push('unlabelled field ' + (input.name || input.id));
  }
  for (const img of document.querySelectorAll('svg, img, [role=img]')) {
    if (img.closest('[aria-hidden=true]')) continue;
    if (img.getAttribute('role') !== 'img' && img.tagName !== 'IMG') problems.push('svg without role=img');
    if (!(img.getAttribute('aria-label') || img.getAttribute('alt'))) problems.push('graphic without a name');
  }
  for (const a of document.querySelectorAll('a')) {
    if (!(a.textContent.trim() || a.getAttribute('aria-label'))) problems.push('empty link ' + a.href);
  }
  for (const th of document.querySelectorAll('thead th')) {
    if (!th.getAttribute('scope')) problems.push('th without scope: ' + th.textContent);
  }
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let checked = 0;
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (!n.textContent.trim()) continue;
    const el = n.parentElement;
    if (!el || el.closest('script, style, [aria-hidden=true], svg')) continue;
    const st = getComputedStyle(el);
    if (st.visibility === 'hidden' || st.display === 'none') continue;
    const fg = lum(st.color); if (!fg) continue;
    const bg = background(el);
    const ratio = (Math.max(fg.l, bg) + 0.05) / (Math.min(fg.l, bg) + 0.05);
    const size = parseFloat(st.fontSize), bold = parseInt(st.fontWeight) >= 700;
    const need = (size >= 24 || (bold && size >= 18.66)) ? 3 : 4.5;
    checked += 1;
    if (ratio < need) problems.push(`contrast ${ratio.toFixed(2)} < ${need}: "${n.textContent.trim().slice(0, 30)}"`);
  }
  if (!checked) problems.push('no text checked');
  return problems;
}
