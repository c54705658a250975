// Single sign-on in a real browser (run by e2e/tests/executors/sso.rs against a real Drover server and
// the real OpenID Connect provider of oidc-provider.mjs). Two modes:
//   node sso.mjs dashboard   sign in to the dashboard through the provider as alice, land as the
//                            mapped tenant and role, see only that tenant's jobs; replay the
//                            provider's callback (refused: its state is spent); take alice's group
//                            away and see the session end at the next refresh.
//   node sso.mjs device URL  approve a CLI's device-flow sign-in at URL as DEVICE_USER.
// Every check throws on failure; the last line printed on success is "sso: all checks passed".
import { chromium } from "playwright-core";
import { strict as assert } from "node:assert";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const AXE = createRequire(import.meta.url).resolve("axe-core/axe.min.js");

const URL = process.env.DROVER_URL;
const ACCOUNTS = process.env.OIDC_ACCOUNTS;
const SHOTS = process.env.SCREENSHOTS;
const step = (what) => console.log(`sso: ${what}`);

// The provider's development login and consent pages: any password; then "Continue" to consent.
async function signInAtProvider(page, login) {
  await page.waitForSelector('input[name="login"]', { timeout: 15000 });
  await page.fill('input[name="login"]', login);
  await page.fill('input[name="password"]', "any-password");
  await page.click('button[type="submit"]');
  await page.waitForSelector('input[name="login"]', { state: "detached", timeout: 15000 });
  // Consent, on this account's first sign-in to this client.
  const consent = page.locator('button:has-text("Continue")').first();
  try {
    await consent.waitFor({ timeout: 3000 });
  } catch {
    return;
  }
  await consent.click();
}

// axe-core in the page: no serious or critical violation.
async function accessible(page, name) {
  await page.addScriptTag({ path: AXE });
  const violations = await page.evaluate(async () => {
    const result = await window.axe.run(document, { resultTypes: ["violations"] });
    return result.violations
      .filter((v) => v.impact === "serious" || v.impact === "critical")
      .map((v) => `${v.id} (${v.impact}): ${v.help}`);
  });
  assert.deepEqual(violations, [], `accessibility violations on ${name}`);
}

function removeAccount(user) {
  const accounts = JSON.parse(readFileSync(ACCOUNTS, "utf8"));
  delete accounts[user];
  writeFileSync(ACCOUNTS, JSON.stringify(accounts));
}

// Loads `page` until it lands on the login page, for at most 20 s.
async function untilSignedOut(page, why) {
  const deadline = Date.now() + 20000;
  for (;;) {
    await page.goto(`${URL}/jobs`);
    if (/\/login\?/.test(page.url())) return;
    assert.ok(Date.now() < deadline, why);
    await page.waitForTimeout(500);
  }
}

function setGroups(user, groups) {
  const accounts = JSON.parse(readFileSync(ACCOUNTS, "utf8"));
  accounts[user] = { ...(accounts[user] || {}), groups };
  writeFileSync(ACCOUNTS, JSON.stringify(accounts));
}

async function dashboard(browser) {
  // bypassCSP: axe-core is injected as an inline script, which the pages' policy would refuse.
  const context = await browser.newContext({ ignoreHTTPSErrors: true, bypassCSP: true, viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  let callback = null;
  page.on("request", (request) => {
    if (request.url().startsWith(`${URL}/login/sso/callback`)) callback = request.url();
  });

  step("the login page offers the provider beside the token form");
  await page.goto(`${URL}/jobs`);
  assert.match(page.url(), /\/login\?/);
  const button = page.locator("#sso-sign-in");
  assert.equal(await button.innerText(), "Sign in with Test IdP");
  assert.equal(await page.locator("#token").count(), 1, "the API-token form stays");
  await accessible(page, "the login page with single sign-on");
  if (SHOTS) await page.screenshot({ path: path.join(SHOTS, "login-sso.png") });

  step("sign in at the provider as alice and land on the jobs page as vision's member");
  await Promise.all([page.waitForLoadState("domcontentloaded"), button.click()]);
  assert.ok(!page.url().startsWith(URL), `expected the provider's page, got ${page.url()}`);
  await signInAtProvider(page, "alice");
  await page.waitForURL(`${URL}/jobs`, { timeout: 15000 });
  const header = await page.locator("header").innerText();
  assert.match(header, /alice/, header);
  assert.match(header, /vision/, header);
  assert.match(header, /member/, header);
  const jobs = await page.locator("main").innerText();
  assert.match(jobs, /vision-job/, "vision's job is listed");
  assert.doesNotMatch(jobs, /speech-job/, "another tenant's job is not");
  if (SHOTS) await page.screenshot({ path: path.join(SHOTS, "signed-in-sso.png") });

  step("the provider's callback replayed is refused: its state was spent");
  assert.ok(callback, "the callback was seen");
  const replay = await (await browser.newContext({ ignoreHTTPSErrors: true })).newPage();
  const answer = await replay.goto(callback);
  assert.equal(answer.status(), 401);
  assert.match(await replay.locator("main").innerText(), /already used or never started/);

  step("dave signs in; his account is then removed at the provider, which refuses the refresh: his session ends");
  setGroups("dave", ["vision-team"]);
  const dave = await (await browser.newContext({ ignoreHTTPSErrors: true })).newPage();
  await dave.goto(`${URL}/jobs`);
  await Promise.all([dave.waitForLoadState("domcontentloaded"), dave.locator("#sso-sign-in").click()]);
  await signInAtProvider(dave, "dave");
  await dave.waitForURL(`${URL}/jobs`, { timeout: 15000 });
  assert.match(await dave.locator("header").innerText(), /dave/);
  removeAccount("dave");
  await untilSignedOut(dave, "the session outlived the provider's refusal to refresh it");
  assert.match(await dave.locator("main").innerText(), /session ended/);

  step("alice's group is taken away at the provider: the session ends at its next refresh");
  setGroups("alice", []);
  await untilSignedOut(page, "the session outlived the group that gave it");
  step("signing in again is refused: no group gives a tenant");
  await page.locator("#sso-sign-in").click();
  await page.waitForLoadState("domcontentloaded");
  // The provider remembers alice's sign-in and consent: straight back to Drover.
  if (!page.url().startsWith(URL)) await signInAtProvider(page, "alice");
  await page.waitForURL((url) => url.toString().startsWith(URL), { timeout: 15000 });
  assert.match(await page.locator("main").innerText(), /none of your groups gives access/);
}

async function device(browser, url, login) {
  const context = await browser.newContext({ ignoreHTTPSErrors: true });
  const page = await context.newPage();
  step(`approve the CLI's sign-in as ${login}`);
  await page.goto(url, { waitUntil: "domcontentloaded" });
  // The code came in the URL: confirm it.
  await Promise.all([page.waitForLoadState("domcontentloaded"), page.click('button:has-text("Continue")')]);
  await signInAtProvider(page, login);
  await page.waitForSelector("text=/Sign-in Success|signed in|You can close/i", { timeout: 15000 });
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
try {
  const [mode, url] = process.argv.slice(2);
  if (mode === "dashboard") await dashboard(browser);
  else if (mode === "device") await device(browser, url, process.env.DEVICE_USER);
  else throw new Error(`unknown mode ${mode}`);
  console.log("sso: all checks passed");
} finally {
  await browser.close();
}
