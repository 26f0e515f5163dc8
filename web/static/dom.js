// dom.js: the page's small helpers for elements and the toast line.

export const $ = (id) => document.getElementById(id);

// el makes an element with props (textContent, never HTML) and children.
export function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  Object.assign(e, props);
  e.append(...children);
  return e;
}

let toastTimer = 0;

// toast shows a message a person can act on for a few seconds.
export function toast(message) {
  const t = $('toast');
  t.textContent = message;
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.hidden = true; }, 6000);
}
