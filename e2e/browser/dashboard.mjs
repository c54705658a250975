// Drives Debian's Chromium through Drover's dashboard (run by e2e/dashboard.rs, which starts the
// server, two executors and a second tenant). Every check throws on failure; the last line printed on
// success is "dashboard: all checks passed".
import { chromium } from "playwright-core";
import { createRequire } from "node:module";
import { strict as assert } from "node:assert";
import path from "node:path";
import { readFileSync } from "node:fs";

const require = createRequire(import.meta.url);
const AXE = require.resolve("axe-core/axe.min.js");
const URL = process.env.DROVER_URL;
const ADMIN = process.env.ADMIN_TOKEN;
const OTHER = process.env.OTHER_TOKEN;
const SHOTS = process.env.SCREENSHOTS;

// The last step passed, named again when a later check fails.
let lastStep = "none yet";
const step = (what) => {
  lastStep = what;
  console.log(`dashboard: ${what}`);
};

// The REST API, for setting up what the browser then looks at.
async function rest(token, method, route, body, contentType = "application/json") {
  const response = await fetch(URL + route, {
    method,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": contentType },
    body: body === undefined ? undefined : (typeof body === "string" ? body : JSON.stringify(body)),
  });
  const json = await response.json();
  if (!response.ok) throw new Error(`${method} ${route}: ${response.status} ${JSON.stringify(json)}`);
  return json;
}

const sleepJob = (name, workers) => `apiVersion: drover.dev/v1
kind: DroverJob
metadata: {name: ${name}}
spec:
  type: command
  command: {argv: [sleep, "600"]}
  resources:
    workers: {min: 1, max: ${workers}}
    ps: {min: 0, max: 0}
    gpus_per_worker: 1
    cpus_per_worker: 1
`;
// A command that handles SIGUSR1 (what "Checkpoint now" sends a command job's tasks), saying so in its log.
const signalJob = (name) => sleepJob(name, 1).replace(
  'argv: [sleep, "600"]', `argv: [sh, -c, "trap 'echo SIGUSR1 received' USR1; while true; do sleep 1; done"]`);

const trainJob = `apiVersion: drover.dev/v1
kind: DroverJob
metadata:
  name: browser-train
  labels: {team: vision}
spec:
  type: train
  train:
    model: {type: mlp, hidden: [256, 128]}
    dataset: {type: digits}
    optimizer: {type: adamw, lr: 0.001}
    batch_size: 256
    max_steps: 6000
    eval_every: 1000
  resources:
    workers: {min: 1, max: 1}
    ps: {min: 0, max: 0}
    gpus_per_worker: 1
    cpus_per_worker: 1
  checkpoint: {every_steps: 1000, keep_last: 2}
`;

// Prints a line and a metrics line four times a second, forty times.
const tickerJob = `apiVersion: drover.dev/v1
kind: DroverJob
metadata: {name: browser-ticker}
spec:
  type: command
  command:
    argv: [python3, -u, -c, "import json, time; [(print('tick', i), print(json.dumps({'drover': 'metrics', 'step': i, 'values': {'loss': 1.0 / i}})), time.sleep(0.25)) for i in range(1, 41)]"]
  resources: {workers: {min: 1, max: 1}, ps: {min: 0, max: 0}, gpus_per_worker: 0, cpus_per_worker: 1}
`;

// A random search of command trials: each reports (x - 0.3)^2 + y for its point after 5 s (so the
// experiment's page is seen updating itself before the search ends).
const searchDoc = `apiVersion: drover.dev/v1
kind: DroverExperiment
metadata: {name: browser-search}
spec:
  trial:
    type: command
    command:
      argv: [python3, -c, 'import json, os, time; p = json.load(open(os.environ["DROVER_HPARAMS_FILE"])); time.sleep(5); print(json.dumps({"drover": "metrics", "step": 1, "values": {"score": (p["x"] - 0.3) ** 2 + p["y"]}}))']
    resources: {workers: {min: 1, max: 1}, ps: {min: 0, max: 0}, gpus_per_worker: 0, cpus_per_worker: 1}
  parameters:
    x: {type: double, min: 0, max: 1}
    y: {type: log_uniform, min: 0.001, max: 1}
    optimizer: {type: categorical, values: [sgd, adamw]}
  metric: {name: score, goal: minimize}
  searcher: {type: random}
  budget: {max_trials: 4, max_concurrent_trials: 2}
`;

// axe-core in the page: no serious or critical violation.
async function accessible(page, name) {
  await page.addScriptTag({ path: AXE });
  const violations = await page.evaluate(async () => {
    const result = await window.axe.run(document, { resultTypes: ["violations"] });
    return result.violations
      .filter((v) => v.impact === "serious" || v.impact === "critical")
      .map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join("; ")}`);
  });
  assert.deepEqual(violations, [], `accessibility violations on ${name}`);
}

async function shoot(page, name) {
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

async function signIn(page, token) {
  await page.goto(`${URL}/jobs`);
  assert.match(page.url(), /\/login\?next=%2Fjobs/, "a page without a session sends to the login");
  await page.fill("#token", token);
  await Promise.all([page.waitForURL(`${URL}/jobs`), page.click("button[type=submit]")]);
}

let page;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
try {
  // bypassCSP: axe-core is injected as an inline script, which the pages' policy would refuse.
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, acceptDownloads: true, bypassCSP: true, ignoreHTTPSErrors: true });
  // A loaded 2-core CI machine runs this beside other e2e tests: waits get a minute, not Playwright's 30 s.
  context.setDefaultTimeout(60_000);
  page = await context.newPage();
  page.on("dialog", (dialog) => dialog.accept());

  // --- Sign in, and a wrong token is refused on the page.
  await page.goto(`${URL}/login`);
  await accessible(page, "login");
  await shoot(page, "login");
  await page.fill("#token", "drv_not-a-token");
  await page.click("button[type=submit]");
  assert.match(await page.textContent("#login-error"), /sign-in refused: invalid token/);
  await signIn(page, ADMIN);
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === "drover_session");
  assert.ok(session.httpOnly && session.sameSite === "Strict", "HttpOnly, SameSite=Strict session");
  // Served over HTTPS (the harness's servers are), the cookie is never sent in the clear.
  assert.ok(!URL.startsWith("https://") || session.secure, "a Secure session cookie over HTTPS");
  assert.notEqual(session.value, ADMIN, "the browser holds a session token, not the API token");
  step("signed in");

  // --- Submit: a bad spec shows the field error beside the editor and keeps the text.
  await page.goto(`${URL}/submit`);
  await accessible(page, "submit");
  const bad = trainJob.replace("batch_size: 256", "batch_size: 0");
  await page.fill("#document", bad);
  await page.click("#submit-form button[type=submit]");
  assert.match(await page.textContent("#submit-error"), /spec\.train\.batch_size/);
  assert.equal(await page.inputValue("#document"), bad, "the text is kept");
  await shoot(page, "submit-error");
  step("a bad spec shows its field error");

  // --- Submit the job and follow it on its page without reloading.
  await page.fill("#document", trainJob);
  await Promise.all([page.waitForURL(/\/jobs\/[0-9a-f-]{36}$/), page.click("#submit-form button[type=submit]")]);
  const trainUrl = page.url();
  const trainId = trainUrl.split("/").pop();
  let navigations = 0;
  page.on("framenavigated", (frame) => { if (frame === page.mainFrame()) navigations += 1; });
  const states = new Set();
  const points = [];
  const deadline = Date.now() + 180_000;
  for (;;) {
    const state = (await page.textContent("#job-state")).trim();
    states.add(state);
    const legend = await page.$eval("#chart", (charts) => charts.textContent);
    const match = legend.match(/loss \((\d+) pts\)/);
    if (match && (points.length === 0 || points[points.length - 1] !== Number(match[1]))) {
      points.push(Number(match[1]));
    }
    if (state === "succeeded") break;
    assert.ok(!["failed", "cancelled"].includes(state), `the job ended ${state}`);
    assert.ok(Date.now() < deadline, `timed out; states seen: ${[...states]}`);
    await page.waitForTimeout(300);
  }
  assert.equal(navigations, 0, "the page was never reloaded");
  assert.ok(states.has("running") && states.has("succeeded"), `states seen: ${[...states]}`);
  assert.ok(points.length >= 2, `the loss curve grew while training: ${points}`);
  assert.ok(points.every((n, i) => i === 0 || n > points[i - 1]), `more points each time: ${points}`);
  await page.waitForFunction(() => document.querySelector("#logs").textContent.includes("finished at step 6000"));
  step(`followed ${trainId}: states ${[...states].join(" → ")}, loss curve ${points.join(" → ")} points`);

  // --- Its checkpoint downloads (after a reload, the page lists it).
  await page.reload();
  await accessible(page, "job");
  await shoot(page, "job");
  const [download] = await Promise.all([
    page.waitForEvent("download"),
    page.click("#checkpoints a[download]"),
  ]);
  const saved = path.join(SHOTS, "checkpoint.tar");
  await download.saveAs(saved);
  const { statSync } = await import("node:fs");
  assert.ok(statSync(saved).size > 1000, "a checkpoint archive came down");
  step("downloaded its checkpoint");

  // --- The chart's controls: log scale and another metric, redrawn without a reload.
  await page.check("#chart-controls input[name=log]");
  await page.waitForFunction(() => document.querySelector("#chart svg").textContent.includes("(log)"));
  // Dragging across a chart zooms to the steps dragged over; the address and the CSV link follow.
  await page.uncheck("#chart-controls input[name=log]");
  await page.waitForFunction(() => !document.querySelector("#chart svg").textContent.includes("(log)"));
  const box = await page.locator("#chart svg[data-x]").first().boundingBox();
  await page.mouse.move(box.x + box.width * 0.3, box.y + box.height * 0.5);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.45, box.y + box.height * 0.5, { steps: 5 });
  await page.mouse.up();
  await page.waitForFunction(() => document.querySelector("#chart-controls input[name=from]").value !== "");
  const from = Number(await page.inputValue("#chart-controls input[name=from]"));
  const to = Number(await page.inputValue("#chart-controls input[name=to]"));
  assert.ok(from > 0 && to > from && to < 6000, `zoomed to steps ${from}–${to}`);
  await page.waitForFunction((f) => document.querySelector("#chart svg[data-x]").dataset.x.split(" ")[2] === String(f), from);
  assert.ok(page.url().includes(`from=${from}`), page.url());
  const [csvFile] = await Promise.all([page.waitForEvent("download"), page.click("#chart-csv")]);
  const csvPath = path.join(SHOTS, "metrics.csv");
  await csvFile.saveAs(csvPath);
  const csvRows = readFileSync(csvPath, "utf8").trim().split("\n");
  assert.equal(csvRows[0], "step,name,value,recorded_at,generation,task,workers,ps,gpu_model");
  const csvSteps = csvRows.slice(1).map((r) => Number(r.split(",")[0]));
  assert.ok(csvSteps.length > 0 && csvSteps.every((n) => n >= from && n <= to), `the CSV holds the zoomed steps: ${csvSteps.slice(0, 5)}`);
  // By time since submission (the steps' zoom dropped), zoomed to a span of time by dragging; the
  // CSV link then holds the steps recorded in that span; then the whole run again.
  await page.selectOption("#chart-controls select[name=x]", "time");
  await page.waitForFunction(() => document.querySelector("#chart svg").textContent.includes("time since submission"));
  assert.equal(await page.inputValue("#chart-controls input[name=from]"), "", "another axis drops the steps' zoom");
  const timeBox = await page.locator("#chart svg[data-x]").first().boundingBox();
  const whole = (await page.getAttribute("#chart svg[data-x]", "data-x")).split(" ").map(Number);
  await page.mouse.move(timeBox.x + timeBox.width * 0.35, timeBox.y + timeBox.height * 0.5);
  await page.mouse.down();
  await page.mouse.move(timeBox.x + timeBox.width * 0.6, timeBox.y + timeBox.height * 0.5, { steps: 5 });
  await page.mouse.up();
  await page.waitForFunction(() => document.querySelector("#chart-controls input[name=from_s]").value !== "");
  const fromS = Number(await page.inputValue("#chart-controls input[name=from_s]"));
  const toS = Number(await page.inputValue("#chart-controls input[name=to_s]"));
  assert.ok(fromS > whole[2] && toS > fromS && toS < whole[3], `zoomed to ${fromS}–${toS} s of ${whole[2]}–${whole[3]} s`);
  await page.waitForFunction((f) => document.querySelector("#chart svg[data-x]").dataset.x.split(" ")[2] === String(f), fromS);
  assert.ok(page.url().includes(`from_s=${fromS}`), page.url());
  await page.waitForFunction(() => document.querySelector("#chart-csv").href.includes("from_step="));
  const spanCsv = new globalThis.URL(await page.getAttribute("#chart-csv", "href"), URL);
  const [spanFrom, spanTo] = [Number(spanCsv.searchParams.get("from_step")), Number(spanCsv.searchParams.get("to_step"))];
  assert.ok(spanFrom > 0 && spanTo > spanFrom && spanTo < 6000, `the span's steps ${spanFrom}–${spanTo}`);
  await page.click("#chart-reset");
  await page.waitForFunction(() => document.querySelector("#chart-controls input[name=from_s]").value === "");
  await shoot(page, "job-zoomed");
  step(`zoomed the charts to steps ${from}–${to} by dragging, downloaded ${csvSteps.length} samples as CSV, drew them by time and zoomed to ${fromS}–${toS} s (steps ${spanFrom}–${spanTo})`);

  // --- Cancel another job from its page; a refused action shows the API's text.
  const cancel = await rest(ADMIN, "POST", "/api/v1/jobs", sleepJob("browser-cancel", 1), "application/yaml");
  await page.goto(`${URL}/jobs/${cancel.job.id}`);
  await Promise.all([page.waitForEvent("load"), page.click("button[data-action=cancel]")]);
  assert.equal((await page.textContent("#job-state")).trim(), "cancelled");
  // What the action did is said after the reload.
  await page.waitForFunction(() => document.querySelector("#toast").textContent.includes("Cancelled."));
  step("cancelled a job");
  const stale = await rest(ADMIN, "POST", "/api/v1/jobs", sleepJob("browser-stale", 1), "application/yaml");
  await page.goto(`${URL}/jobs/${stale.job.id}`);
  await rest(ADMIN, "POST", `/api/v1/jobs/${stale.job.id}/cancel`, {});
  await page.click("button[data-action=cancel]");
  await page.waitForFunction(() => document.querySelector("#action-error").textContent.includes("cannot become"));
  step("a refused action shows the API's error");

  // --- Resize a third.
  const resize = await rest(ADMIN, "POST", "/api/v1/jobs", signalJob("browser-resize"), "application/yaml");
  await page.goto(`${URL}/jobs/${resize.job.id}`);
  await page.waitForFunction(() => document.querySelector("#job-state").textContent.trim() === "running", null, { timeout: 60_000 });
  // Checkpoint now (offered once the page is loaded on a running job): a command job's tasks get
  // SIGUSR1, which the confirmation warns of; what was asked is said after the reload, and the
  // program's log shows the signal arrived.
  await page.reload();
  assert.match(await page.getAttribute("button[data-action=checkpoint]", "data-confirm"), /SIGUSR1/);
  await Promise.all([page.waitForEvent("load"), page.click("button[data-action=checkpoint]")]);
  await page.waitForFunction(() => document.querySelector("#toast").textContent.includes("Asked 1 running task to write a checkpoint now"));
  await page.waitForFunction(() => document.querySelector("#logs").textContent.includes("SIGUSR1 received"), null, { timeout: 30_000 });
  assert.equal((await page.textContent("#job-state")).trim(), "running");
  step("asked a running job for a checkpoint now");
  // The form starts from the job's ranges, and says them.
  assert.equal(await page.inputValue("input[name=workers_min]"), "1");
  assert.equal(await page.inputValue("input[name=ps_max]"), "0");
  assert.match(await page.textContent("#resize-hint"), /Now workers 1, PS 0\./);
  await page.fill("input[name=workers_min]", "3");
  await page.fill("input[name=workers_max]", "2");
  // A range upside down: the API names the field, and the page shows it.
  await page.click("#resize-form button[type=submit]");
  await page.waitForFunction(() => document.querySelector("#action-error").textContent.includes("spec.resources.workers"));
  await page.fill("input[name=workers_min]", "1");
  await page.fill("input[name=ps_min]", "1");
  await page.fill("input[name=ps_max]", "1");
  await Promise.all([page.waitForEvent("load"), page.click("#resize-form button[type=submit]")]);
  // After the reload, the outcome is said, and the form shows the new ranges.
  await page.waitForFunction(() => document.querySelector("#toast").textContent.includes("Resized to workers 1–2, PS 1."));
  assert.match(await page.textContent("#toast"), /rescales it at its next round/);
  assert.match(await page.textContent("#resize-hint"), /Now workers 1–2, PS 1\./);
  const spec = await page.textContent(".spec");
  assert.match(spec, /ps:\s*\n\s*max: 1\s*\n\s*min: 1/, spec);
  assert.match(spec, /workers:\s*\n\s*max: 2\s*\n\s*min: 1/, spec);
  step("resized a job");

  // --- An experiment: its trials run, its page shows them sorted by the metric, with its charts.
  const search = await rest(ADMIN, "POST", "/api/v1/experiments", searchDoc, "application/yaml");
  const searchId = search.experiment.id;
  // Its page, opened at once, shows the trials' values as they come, without a reload.
  await page.goto(`${URL}/experiments/${searchId}`);
  let experimentNavigations = 0;
  const countExperimentNavigations = (frame) => { if (frame === page.mainFrame()) experimentNavigations += 1; };
  page.on("framenavigated", countExperimentNavigations);
  await page.waitForFunction(
    () => [...document.querySelectorAll("#trials-rows tr td:nth-child(4)")].some((c) => /^-?\d/.test(c.textContent.trim())),
    null, { timeout: 120_000 });
  assert.equal(experimentNavigations, 0, "a trial's value appeared without a reload");
  page.off("framenavigated", countExperimentNavigations);
  step("an experiment's page showed a trial's value as it came");
  for (let i = 0; ; i++) {
    const e = (await rest(ADMIN, "GET", `/api/v1/experiments/${searchId}`)).experiment;
    if (e.state === "succeeded") break;
    assert.ok(i < 240 && e.state !== "failed", `the experiment finishes: ${JSON.stringify(e)}`);
    await page.waitForTimeout(500);
  }
  await page.goto(`${URL}/experiments`);
  await Promise.all([page.waitForEvent("load"), page.click(`a[href="/experiments/${searchId}"]`)]);
  const values = await page.$$eval("#trials tbody tr td:nth-child(4)", (cells) => cells.map((c) => Number(c.textContent)));
  assert.equal(values.length, 4, "every trial is listed");
  assert.deepEqual(values, [...values].sort((a, b) => a - b), "sorted by the metric, lowest (best) first");
  assert.ok((await page.textContent("#trials tbody tr:first-child")).includes("(best)"), "the best trial leads");
  assert.equal(await page.locator("figure.chart-box svg").count(), 6, "best so far, curves, parallel coordinates, a scatter per parameter");
  // Every trial a line through its parameters and score, the choices and log values on their axes.
  assert.equal(await page.locator("#parallel g.trial-line").count(), 4, "a line per trial");
  const parallelText = await page.textContent("#parallel");
  assert.ok(parallelText.includes("adamw") && parallelText.includes("y (log)") && parallelText.includes("(best)"), parallelText);
  assert.equal(await page.locator("section[aria-labelledby=scatter-title] circle").count(), 12, "each trial a dot on each scatter");
  // The categorical parameter's scatter names its choices on the axis; the log-uniform one its values.
  const scatterText = await page.textContent("section[aria-labelledby=scatter-title]");
  assert.ok(scatterText.includes("sgd") && scatterText.includes("adamw"), scatterText);
  assert.ok(!scatterText.includes("log10"), "log axes in the parameter's values");
  // A column per parameter, each sorting the trials by it.
  assert.deepEqual(await page.$$eval("#trials th.param", (th) => th.map((h) => h.textContent.trim())), ["optimizer", "x", "y"]);
  await page.click("#trials th.param:nth-of-type(7) button.sort");
  const xs = await page.$$eval("#trials tbody tr td:nth-child(7)", (cells) => cells.map((c) => Number(c.dataset.sort)));
  assert.deepEqual(xs, [...xs].sort((a, b) => a - b), "sorted by x");
  assert.equal(await page.locator("section[aria-labelledby=curves-title] circle").count(), 4, "a one-step curve shows as a dot");
  await accessible(page, "experiment");
  await shoot(page, "experiment");
  await Promise.all([page.waitForEvent("load"), page.click('a[href="?sort=trial"]')]);
  assert.equal((await page.textContent("#trials tbody tr:first-child td:nth-child(2)")).trim().split(" ")[0], "0");
  step("an experiment's page shows its trials, sorted, and its charts");
  // The trials filtered by what a row says: the optimizer's choice.
  const adamw = await page.$$eval("#trials-rows tr", (rows) => rows.filter((r) => r.textContent.includes("adamw")).length);
  await page.fill("#trials-filter", "ADAMW");
  assert.equal(await page.locator("#trials-rows tr:visible").count(), adamw, "only the adamw trials shown");
  assert.equal(await page.textContent("#trials-shown"), `${adamw} of 4 trials shown.`);
  await page.fill("#trials-filter", "");
  assert.equal(await page.locator("#trials-rows tr:visible").count(), 4);
  // Two trials side by side: a column each, their hyper-parameters among the fields that differ.
  await page.check("#trials tbody tr:nth-child(1) input[name=job]");
  await page.check("#trials tbody tr:nth-child(2) input[name=job]");
  await Promise.all([page.waitForURL(/\/compare\?/), page.click("#trials-chosen button[type=submit]")]);
  assert.equal(await page.locator("#compare-jobs thead th").count(), 3, "a column per trial");
  const differ = await page.textContent("#compare-differ");
  // x and y are drawn from continuous ranges: they differ (the optimizer may not).
  assert.ok(differ.includes("hyper-parameter x") && differ.includes("hyper-parameter y"), differ);
  assert.ok((await page.textContent("#compare-jobs")).includes("Last score"), "each trial's last score");
  assert.equal(await page.locator("#compare-charts svg").count(), 1, "the score, a line (here a dot) per trial");
  await accessible(page, "compare");
  await shoot(page, "compare");
  step("compared two trials side by side");

  // --- A job's whole log: new lines appear without a reload, metric lines hidden unless asked, a
  // search marks its matches, and the filtered text downloads.
  const ticker = await rest(ADMIN, "POST", "/api/v1/jobs", tickerJob, "application/yaml");
  await page.goto(`${URL}/jobs/${ticker.job.id}/logs`);
  let logNavigations = 0;
  const countLogNavigations = (frame) => { if (frame === page.mainFrame()) logNavigations += 1; };
  page.on("framenavigated", countLogNavigations);
  await page.waitForFunction(() => /tick 40\b/.test(document.querySelector("#log-lines").textContent), null, { timeout: 120_000 });
  await page.waitForFunction(() => document.querySelector("#log-follow").textContent.includes("end of its log"));
  page.off("framenavigated", countLogNavigations);
  assert.equal(logNavigations, 0, "the log page followed the job without a reload");
  assert.ok(!(await page.textContent("#log-lines")).includes('"drover"'), "metric lines hidden");
  await page.reload();
  await accessible(page, "log");
  await shoot(page, "log");
  await page.fill("input[name=q]", "TICK 3");
  await Promise.all([page.waitForEvent("load"), page.click("form[role=search] button[type=submit]")]);
  assert.equal(await page.locator("#log-lines mark").count(), 11, "tick 3 and tick 30-39 marked");
  await page.fill("input[name=q]", "");
  await page.check("input[name=metrics]");
  await Promise.all([page.waitForEvent("load"), page.click("form[role=search] button[type=submit]")]);
  assert.ok((await page.textContent("#log-lines")).includes('"drover": "metrics"'), "metric lines on request");
  const [logFile] = await Promise.all([
    page.waitForEvent("download"),
    page.click("form[role=search] a[download]"),
  ]);
  const logPath = path.join(SHOTS, "ticker.log");
  await logFile.saveAs(logPath);
  const text = readFileSync(logPath, "utf8").trim().split("\n");
  // Every line with the metric lines, as the page was filtered: 40 ticks, 40 metrics lines.
  assert.equal(text.length, 80, text.join("\n"));
  assert.equal(text.filter((l) => / \[g1 worker-0\] tick \d+$/.test(l)).length, 40, text.join("\n"));
  assert.equal(text.filter((l) => l.includes('"drover": "metrics"')).length, 40, text.join("\n"));
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(`${URL}/jobs/${ticker.job.id}/logs`);
  await accessible(page, "log (phone)");
  await shoot(page, "log-phone");
  await page.setViewportSize({ width: 1280, height: 800 });
  step("a job's whole log followed, searched, filtered and downloaded");

  // --- Every page: accessible, screenshot, light and dark, desktop and phone width.
  // Each node's CPU and memory use now, and a line of its CPU use over the last minutes.
  await page.goto(`${URL}/nodes`);
  assert.match(await page.textContent("section.node .use-now"), /CPU \d+% · memory [\d.]+ of [\d.]+ GB/);
  assert.ok(await page.locator("section.node svg.spark").count() >= 1, "a CPU sparkline");
  for (const [name, route] of [["overview", "/"], ["jobs", "/jobs"], ["experiments", "/experiments"], ["queue", "/queue"], ["nodes", "/nodes"], ["tenants", "/tenants"]]) {
    const response = await page.goto(URL + route);
    assert.equal(response.status(), 200, `${route} answers`);
    await accessible(page, name);
    await shoot(page, name);
  }
  // The jobs table redraws itself when a job arrives, keeping the sort the user chose.
  await page.goto(`${URL}/jobs`);
  await page.click("#jobs-table th:nth-child(2) button.sort");
  const live = await rest(ADMIN, "POST", "/api/v1/jobs", sleepJob("browser-live", 1), "application/yaml");
  await page.waitForFunction(() => document.querySelector("#jobs-rows").textContent.includes("browser-live"));
  const sorted = await page.evaluate(() => {
    const names = [...document.querySelectorAll("#jobs-rows tr td:nth-child(2)")].map((c) => c.textContent.trim());
    return names.length > 3 && names.every((n, i) => i === 0 || names[i - 1].localeCompare(n) <= 0);
  });
  assert.ok(sorted, "the rows stay sorted by name through the live redraw");
  step("the jobs table showed a new job without a reload, still sorted");
  // Ticked jobs stay ticked through a redraw; a bulk action acts on them and says what it did.
  await page.check(`input[name=job][value="${live.job.id}"]`);
  const another = await rest(ADMIN, "POST", "/api/v1/jobs", sleepJob("browser-bulk", 1), "application/yaml");
  await page.waitForFunction(() => document.querySelector("#jobs-rows").textContent.includes("browser-bulk"));
  assert.ok(await page.isChecked(`input[name=job][value="${live.job.id}"]`), "still ticked after the redraw");
  await page.check(`input[name=job][value="${another.job.id}"]`);
  await Promise.all([page.waitForEvent("load"), page.click("button[data-bulk=cancel]")]);
  await page.waitForFunction(() => document.querySelector("#toast").textContent.includes("2 of 2 jobs cancelled."));
  for (const id of [live.job.id, another.job.id]) {
    assert.equal((await rest(ADMIN, "GET", `/api/v1/jobs/${id}`)).job.state, "cancelled");
  }
  step("cancelled two ticked jobs at once from the jobs list");
  await page.goto(`${URL}/jobs?state=succeeded&name=browser`);
  assert.ok((await page.textContent("#jobs-rows")).includes("browser-train"), "filters find the job");
  assert.ok(!(await page.textContent("#jobs-rows")).includes("browser-resize"), "and only it");
  await page.emulateMedia({ colorScheme: "dark" });
  await page.goto(trainUrl);
  await accessible(page, "job (dark)");
  await shoot(page, "job-dark");
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(`${URL}/jobs`);
  await accessible(page, "jobs (phone, dark)");
  await shoot(page, "jobs-phone-dark");
  await page.emulateMedia({ colorScheme: "light" });
  await page.goto(`${URL}/`);
  await shoot(page, "overview-phone");
  step("every page passes axe-core, light and dark, 1280×800 and 390 wide");

  // --- Tokens: created with the secret shown once.
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.goto(`${URL}/tenants`);
  await page.fill("#token-form input[name=name]", "from-the-browser");
  await page.fill("#token-form input[name=days]", "7");
  await page.click("#token-form button");
  await page.waitForFunction(() => !document.querySelector("#new-token").hidden);
  assert.match(await page.textContent("#new-token-secret"), /^drv_/);
  // Seven days were asked; the session caps it, and the page says so (it used to say nothing).
  assert.match(await page.textContent("#new-token-expiry"), /earlier than asked/);
  step("created a token");

  // --- Administration: a tenant added, its quota changed (the form fills in the current one), a
  // user added with a first token that signs in.
  await page.fill("#tenant-form input[name=name]", "gamma");
  await page.fill("#tenant-form input[name=guaranteed]", "2");
  await page.fill("#tenant-form input[name=max]", "4");
  await Promise.all([page.waitForEvent("load"), page.click("#tenant-form button")]);
  assert.match(await page.textContent("#toast"), /Added tenant gamma: 2 GPUs guaranteed, at most 4\./);
  assert.ok(await page.locator('tr[data-tenant="gamma"]').count() === 1, "the new tenant is listed");
  await page.fill("#tenant-form input[name=name]", "gamma");
  assert.equal(await page.inputValue("#tenant-form input[name=guaranteed]"), "2", "the current quota filled in");
  await page.fill("#tenant-form input[name=guaranteed]", "1");
  await Promise.all([page.waitForEvent("load"), page.click("#tenant-form button")]);
  assert.match(await page.textContent("#toast"), /The quota of gamma: 1 GPU guaranteed, at most 4\./);
  assert.equal(((await rest(ADMIN, "GET", "/api/v1/tenants/gamma")).tenant.quota.guaranteed_gpus), 1);
  await page.fill("#user-form input[name=name]", "grace");
  await page.selectOption("#user-form select[name=tenant]", "gamma");
  await page.selectOption("#user-form select[name=role]", "viewer");
  await page.click("#user-form button");
  await page.waitForFunction(() => !document.querySelector("#new-user").hidden);
  assert.match(await page.textContent("#new-user-said"), /Added grace to gamma as viewer/);
  const graceToken = (await page.textContent("#new-user-secret")).trim();
  const me = await rest(graceToken, "GET", "/api/v1/me");
  assert.equal(me.user.name, "grace");
  assert.equal(me.user.tenant, "gamma");
  await accessible(page, "tenants (administration)");
  await shoot(page, "tenants-admin");
  step("added a tenant, changed its quota and added a user who can sign in");

  // --- Another tenant's user: refused the admin tenant's job page, logs and checkpoints by URL.
  const other = await browser.newContext({ viewport: { width: 1280, height: 800 }, bypassCSP: true, ignoreHTTPSErrors: true });
  other.setDefaultTimeout(60_000);
  const otherPage = await other.newPage();
  await signIn(otherPage, OTHER);
  assert.ok(!(await otherPage.textContent("main")).includes("browser-train"), "the jobs list is scoped");
  for (const route of [`/jobs/${trainId}`, `/jobs/${trainId}/chart?metrics=loss`, `/jobs/${trainId}/live`,
    `/api/v1/jobs/${trainId}/logs`, `/api/v1/jobs/${trainId}/checkpoints`, `/submit?from=${trainId}`,
    `/experiments/${searchId}`]) {
    const response = await otherPage.goto(URL + route);
    assert.equal(response.status(), 404, `${route} is another tenant's`);
  }
  const checkpoints = await rest(ADMIN, "GET", `/api/v1/jobs/${trainId}/checkpoints`);
  const ckpt = checkpoints.checkpoints[0].id;
  const refused = await otherPage.goto(`${URL}/api/v1/jobs/${trainId}/checkpoints/${ckpt}/download`);
  assert.equal(refused.status(), 404, "another tenant's checkpoint");
  await shoot(otherPage, "other-tenant-refused");
  // The session cookie cannot change anything without the page's CSRF token.
  const forged = await otherPage.evaluate(async (url) => (await fetch(url, { method: "POST" })).status,
    `${URL}/api/v1/jobs/${trainId}/cancel`);
  assert.equal(forged, 403, "a cookie-only POST is refused");
  step("another tenant's user is refused");

  // --- Sign out ends the session.
  await page.click("header form button");
  await page.waitForURL(/\/login/);
  const after = await page.goto(`${URL}/jobs`);
  assert.match(after.url(), /\/login/, "signed out");
  step("signed out");

  // --- A sign-in link pasted into a tab already on /login changes only the hash: it still signs in.
  await page.evaluate((token) => { location.hash = `#token=${encodeURIComponent(token)}`; }, ADMIN);
  await page.waitForURL((url) => !url.pathname.startsWith("/login"));
  step("a #token= link signs in from the login page");

  // --- An unknown page is a page saying so, with the way back (not the API's JSON); a favicon.
  const missing = await page.goto(`${URL}/no-such-page`);
  assert.equal(missing.status(), 404);
  assert.match(await page.textContent("h1"), /Not found/);
  assert.ok(await page.$("a[href='/']"), "a link back");
  const icon = await page.goto(`${URL}/static/favicon.svg`);
  assert.equal(icon.status(), 200);
  step("an unknown page says so; the favicon is served");
  console.log("dashboard: all checks passed");
} catch (error) {
  // Say where it stopped in one line first (CI shows the ends of long output), then leave the page.
  console.error(`dashboard: FAILED after "${lastStep}" at ${page?.url()}: ${error.message.split("\n")[0]}`);
  if (page) await shoot(page, "failure").catch(() => {});
  throw error;
} finally {
  await browser.close();
}
