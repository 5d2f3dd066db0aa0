import assert from "node:assert/strict";
import { parseHTML } from "linkedom";
import {
  Figure,
  JUPYTER_DISPLAY,
  Plot,
  plot,
  saveFigure,
  show,
  svgToPng,
  table,
  toSvgString,
} from "../lib/plot/mod.ts";

function pngSize(png: Uint8Array): { width: number; height: number } {
  const view = new DataView(png.buffer, png.byteOffset, png.byteLength);
  return { width: view.getUint32(16), height: view.getUint32(20) };
}

const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

Deno.test("a bare plot exports as a standalone SVG with the SVG namespace", () => {
  const fig = plot({ width: 300, height: 200, marks: [Plot.barY([3, 1, 2])] });
  const svg = fig.svg();
  assert.match(svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
  assert.equal((svg.match(/xmlns="http:\/\/www\.w3\.org\/2000\/svg"/g) ?? []).length, 1);
  assert.equal((svg.match(/<rect /g) ?? []).length, 3);
});

Deno.test("a figure with title, legend and caption flattens into one parseable SVG", () => {
  const fig = plot({
    title: "Samples per rollout",
    subtitle: "prefix_merge",
    caption: "shared trajectories",
    color: { legend: true },
    marks: [Plot.barY([{ k: "a", v: 1 }, { k: "b", v: 2 }], { x: "k", y: "v", fill: "k" })],
  });
  assert.equal(fig.element.tagName.toLowerCase(), "figure");
  const svg = fig.svg();
  const { document: doc } = parseHTML(`<html><body>${svg}</body></html>`);
  const root = doc.querySelector("svg");
  assert.ok(root);
  assert.equal(root.getAttribute("xmlns"), "http://www.w3.org/2000/svg");
  const texts = Array.from(root.querySelectorAll(":scope > text")).map((t) => t.textContent);
  assert.deepEqual(texts, ["Samples per rollout", "prefix_merge", "a", "b", "shared trajectories"]);
  assert.ok(Number(root.getAttribute("height")) > 400, "headings add height above the plot");
});

Deno.test("PNG export draws text with the DejaVu font and honours the width", async () => {
  const withText = '<svg xmlns="http://www.w3.org/2000/svg" width="120" height="40">' +
    '<text x="5" y="25" font-size="20" font-family="sans-serif">Hello</text></svg>';
  const blank = '<svg xmlns="http://www.w3.org/2000/svg" width="120" height="40"></svg>';
  const a = await svgToPng(withText);
  const b = await svgToPng(blank);
  assert.deepEqual(Array.from(a.slice(0, 8)), PNG_SIGNATURE);
  assert.deepEqual(pngSize(a), { width: 120, height: 40 });
  assert.notDeepEqual(a, b, "text must change the pixels, so a font was loaded");
  assert.deepEqual(pngSize(await svgToPng(withText, { width: 240 })), { width: 240, height: 80 });
});

Deno.test("PNG export rejects a missing font file by name", async () => {
  await assert.rejects(
    () => svgToPng("<svg xmlns='http://www.w3.org/2000/svg'/>", { fontFiles: ["/nope.ttf"] }),
    /fontFiles: not found: \/nope\.ttf/,
  );
});

Deno.test("saveFigure writes SVG and PNG files and validates names and extensions", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const fig = plot({ marks: [Plot.lineY([1, 3, 2])] });
    const paths = await saveFigure(fig, "line", { dir, png: true });
    assert.deepEqual(paths, [`${dir}/line.svg`, `${dir}/line.png`]);
    assert.match(await Deno.readTextFile(paths[0]), /^<svg xmlns=/);
    const png = await Deno.readFile(paths[1]);
    assert.deepEqual(Array.from(png.slice(0, 8)), PNG_SIGNATURE);
    await assert.rejects(() => saveFigure(fig, "../escape", { dir }), /name: expected/);
    await assert.rejects(() => fig.save(`${dir}/x.jpg`), /path: expected a \.svg or \.png/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("figures and tables offer a Jupyter MIME bundle", () => {
  const fig = new Figure(plot({ marks: [Plot.dot([[0, 0]])] }).element);
  const bundle = fig[JUPYTER_DISPLAY]();
  assert.equal(bundle["image/svg+xml"], fig.svg());
  const t = table([{ mode: "token_mean", share: 1 / 3 }, { mode: "rollout_token_mean", share: 1 }]);
  const tb = t[JUPYTER_DISPLAY]();
  assert.match(tb["text/html"], /<td>0\.3333<\/td>/);
  assert.equal(t.text().split("\n")[2].trim(), "token_mean          0.3333");
});

Deno.test("toSvgString refuses an element that holds no svg", () => {
  const { document: doc } = parseHTML("<html><body><figure><p>x</p></figure></body></html>");
  assert.throws(() => toSvgString(doc.querySelector("figure")!), /holds no <svg>/);
});

Deno.test("show is a no-op outside a notebook kernel, not an error", async () => {
  // Deno 2.9 throws on reading `Deno.jupyter` outside `deno jupyter`; scripts call show() too.
  await show(plot({ marks: [Plot.dot([{ x: 1, y: 2 }], { x: "x", y: "y" })] }));
});
