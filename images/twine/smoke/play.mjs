// Playtest a compiled story in headless Chromium: open the file, click the
// link, and wait for the second passage's text.
//   node play.mjs STORY.html LINK_TEXT EXPECTED_TEXT
import { chromium } from 'playwright-core';

const [file, link, expected] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH, args: ['--no-sandbox'] });
try {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(`file://${file}`);
  // The raw passages are in the page too, hidden in <tw-storydata>: only
  // visible text counts.
  await page.getByText(link, { exact: true }).filter({ visible: true }).first().click({ timeout: 15000 });
  await page.getByText(expected).filter({ visible: true }).first().waitFor({ timeout: 15000 });
  if (errors.length) throw new Error(`page errors: ${errors.join(' | ')}`);
  console.log(`playtest ${file.split('/').pop()}: clicked "${link}", saw "${expected}"`);
} finally {
  await browser.close();
}
