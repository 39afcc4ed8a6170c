// URL slugs from titles: a skillbox tool written in JavaScript.
//
// Built into a WebAssembly component with componentize-js (see
// docs/authoring.md); skillbox derives the tool's JSON schema from the WIT
// world in wit/slug. The component imports wasi:http like every
// componentize-js component, and runs without any network grant.

export function slugify(title, maxLength) {
  // The engine has no Unicode normalization; anything not a-z0-9
  // separates words.
  const words = title
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter((w) => w.length > 0);
  let slug = words.join("-");
  const limit = maxLength ?? 80;
  if (slug.length > limit) {
    slug = slug.slice(0, limit).replace(/-+$/, "");
  }
  return slug;
}
