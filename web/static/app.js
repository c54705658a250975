// Drover's dashboard script: local times, live updates over one server-sent-event stream per page,
// and buttons that call the REST API with the session cookie and its CSRF token. Pages work without
// it (they are server-rendered); it only adds what a browser cannot do from markup alone.
"use strict";

const csrf = () => document.body.dataset.csrf || "";

// ---- Times: in the browser's zone, with how long ago.
function relative(date) {
  const seconds = Math.round((Date.now() - date.getTime()) / 1000);
  const abs = Math.abs(seconds);
  const [n, unit] = abs < 60 ? [abs, "s"] : abs < 3600 ? [Math.round(abs / 60), "min"]
    : abs < 86400 ? [Math.round(abs / 3600), "h"] : [Math.round(abs / 86400), "d"];
  return seconds >= 0 ? `${n} ${unit} ago` : `in ${n} ${unit}`;
}

function localTimes(root) {
  for (const el of (root || document).querySelectorAll("time[datetime]")) {
    const date = new Date(el.getAttribute("datetime"));
    if (isNaN(date)) continue;
    el.textContent = `${date.toLocaleString()} (${relative(date)})`;
    el.title = el.getAttribute("datetime");
  }
}

// ---- The REST API, with the session cookie; errors carry the API's own text.
async function api(method, path, body) {
  const headers = { "X-CSRF-Token": csrf() };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let json = null;
  try { json = JSON.parse(text); } catch (_) { /* not JSON */ }
  if (!response.ok) {
    const error = json && json.error;
    const field = error && error.field ? `${error.field}: ` : "";
    throw new Error(error ? `${field}${error.message}` : `${response.status} ${text}`);
  }
  return json;
}

// A message for the next page load (an action's outcome, said after the reload that shows it).
function flash(message) {
  try { sessionStorage.setItem("drover-flash", message); } catch (_) { /* storage refused */ }
}

function showFlash() {
  let message = null;
  try {
    message = sessionStorage.getItem("drover-flash");
    sessionStorage.removeItem("drover-flash");
  } catch (_) { return; }
  const toast = document.getElementById("toast");
  if (!message || !toast) return;
  toast.textContent = message;
  toast.classList.add("shown");
  setTimeout(() => toast.classList.remove("shown"), 10000);
}

function showError(message) {
  const el = document.getElementById("action-error");
  if (el) el.textContent = message;
  else alert(message);
}

// Runs `action` after the user confirms what the button's data-confirm says.
async function confirmed(button, action) {
  const question = button.dataset.confirm;
  if (question && !window.confirm(question)) return;
  button.disabled = true;
  try {
    showError("");
    await action();
  } catch (err) {
    showError(err.message);
  } finally {
    button.disabled = false;
  }
}

// ---- Login: a link carrying `#token=…` (from `drover dev`) signs in without showing the token.
function login() {
  const form = document.getElementById("login-form");
  if (!form) return;
  const signIn = () => {
    const match = location.hash.match(/^#token=(.+)$/);
    if (match) {
      history.replaceState(null, "", location.pathname + location.search);
      form.elements.token.value = decodeURIComponent(match[1]);
      form.submit();
    }
  };
  signIn();
  // The link pasted into a tab already on /login changes only the hash: no new page load.
  window.addEventListener("hashchange", signIn);
}

// ---- Tables whose headers sort the rows.
function sortRows(table, column, ascending) {
  const body = table.tBodies[0];
  const key = (row) => {
    const cell = row.children[column];
    return cell ? (cell.dataset.sort ?? cell.textContent.trim()) : "";
  };
  const rows = [...body.rows];
  rows.sort((a, b) => {
    const [x, y] = [key(a), key(b)];
    const numeric = x !== "" && y !== "" && !isNaN(x) && !isNaN(y);
    const order = numeric ? Number(x) - Number(y) : x.localeCompare(y);
    return ascending ? order : -order;
  });
  rows.forEach((row) => body.appendChild(row));
}

// The sort a table's header shows, applied again (after a live redraw of its rows).
function resort(table) {
  const th = table && table.querySelector("th[aria-sort]");
  if (!th) return;
  sortRows(table, [...th.parentNode.children].indexOf(th), th.getAttribute("aria-sort") === "ascending");
}

function sortable() {
  for (const table of document.querySelectorAll("table.sortable")) {
    table.querySelectorAll("th button.sort").forEach((button) => {
      button.addEventListener("click", () => {
        const th = button.closest("th");
        const column = [...th.parentNode.children].indexOf(th);
        const ascending = th.getAttribute("aria-sort") !== "ascending";
        table.querySelectorAll("th").forEach((h) => h.removeAttribute("aria-sort"));
        th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
        sortRows(table, column, ascending);
      });
    });
  }
}

// ---- The jobs table and the queue follow their streams.
function jobsList() {
  for (const id of ["jobs-rows", "queue-rows"]) {
    const body = document.getElementById(id);
    if (!body || !window.EventSource) continue;
    const source = new EventSource(body.dataset.live + location.search);
    source.addEventListener("rows", (event) => {
      // Jobs ticked stay ticked through the redraw.
      const chosen = new Set([...body.querySelectorAll("input[name=job]:checked")].map((i) => i.value));
      body.innerHTML = event.data;
      for (const input of body.querySelectorAll("input[name=job]")) input.checked = chosen.has(input.value);
      localTimes(body);
      // A sort the user chose stays through the redraw.
      resort(body.closest("table.sortable"));
    });
  }
}

// ---- The jobs list's bulk actions: pause, resume or cancel every ticked job, then say what happened.
function bulkActions() {
  const form = document.getElementById("jobs-chosen");
  if (!form) return;
  const words = { pause: ["Pause", "paused"], resume: ["Resume", "resumed"], cancel: ["Cancel", "cancelled"] };
  for (const button of form.querySelectorAll("button[data-bulk]")) {
    button.addEventListener("click", async () => {
      const action = button.dataset.bulk;
      const [verb, done] = words[action];
      const chosen = [...document.querySelectorAll("input[name=job][form=jobs-chosen]:checked")];
      if (chosen.length === 0) {
        showError("Tick the jobs to act on in the first column first.");
        return;
      }
      const names = chosen.map((input) => input.getAttribute("aria-label").replace(/^choose /, ""));
      if (!window.confirm(`${verb} ${chosen.length} job${chosen.length === 1 ? "" : "s"} (${names.join(", ")})?`)) return;
      button.disabled = true;
      const refused = [];
      for (const [i, input] of chosen.entries()) {
        try {
          await api("POST", `/api/v1/jobs/${input.value}/${action}`, {});
        } catch (err) {
          refused.push(`${names[i]}: ${err.message}`);
        }
      }
      const ok = chosen.length - refused.length;
      flash(`${ok} of ${chosen.length} jobs ${done}.${refused.length ? ` Refused: ${refused.join("; ")}` : ""}`);
      location.reload();
    });
  }
}

// ---- A job's page: live state, timeline, logs and chart; its buttons.
function jobPage() {
  const root = document.getElementById("job");
  if (!root) return;
  const id = root.dataset.job;
  const chart = document.getElementById("chart");
  const controls = document.getElementById("chart-controls");
  let chartTimer = null;
  const csv = document.getElementById("chart-csv");
  // `remember`: a change the user made, which the address then keeps (live redraws change nothing).
  const redrawChart = async (remember) => {
    const query = new URLSearchParams(new FormData(controls));
    const response = await fetch(`/jobs/${id}/chart?${query}`, { credentials: "same-origin" });
    const chartError = document.getElementById("chart-error");
    if (!response.ok) {
      chartError.textContent = await response.text();
      return;
    }
    chartError.textContent = "";
    chart.innerHTML = await response.text();
    // The address and the CSV link follow the options: a reload or a shared link shows these charts.
    if (remember && location.search !== `?${query}`) {
      history.replaceState(null, "", `/jobs/${id}?${query}#metrics-title`);
    }
    // The CSV of what is drawn (a span of time drawn is the steps recorded in it), from the server.
    const link = (response.headers.get("Link") || "").match(/<([^>]+)>/);
    if (link) csv.href = link[1];
  };
  const scheduleChart = () => {
    if (chartTimer) return;
    chartTimer = setTimeout(() => { chartTimer = null; redrawChart(false); }, 1000);
  };
  controls.addEventListener("submit", (event) => { event.preventDefault(); redrawChart(true); });
  document.getElementById("chart-reset").addEventListener("click", (event) => {
    event.preventDefault();
    for (const name of ["from", "to", "from_s", "to_s"]) controls.elements[name].value = "";
    redrawChart(true);
  });
  // Another x axis: the zoom of the other is dropped, and the span's fields show by time only.
  controls.elements.x.addEventListener("change", () => {
    for (const name of ["from", "to", "from_s", "to_s"]) controls.elements[name].value = "";
    document.getElementById("chart-span").hidden = controls.elements.x.value !== "time";
  });
  // Dragging across a chart (with a mouse) zooms to the steps, or the span of time, dragged over.
  let drag = null;
  chart.addEventListener("pointerdown", (event) => {
    const svg = event.target.closest("svg[data-x]");
    if (!svg || event.pointerType !== "mouse") return;
    const [left, right, lo, hi] = svg.dataset.x.split(" ").map(Number);
    const box = svg.getBoundingClientRect();
    const scale = svg.viewBox.baseVal.width / box.width;
    const toPlot = (clientX) => Math.min(right, Math.max(left, (clientX - box.left) * scale));
    const band = document.createElementNS("http://www.w3.org/2000/svg", "rect");
    band.setAttribute("class", "zoom-band");
    band.setAttribute("y", "0");
    band.setAttribute("height", String(svg.viewBox.baseVal.height));
    band.setAttribute("width", "0");
    svg.append(band);
    drag = { band, start: toPlot(event.clientX), toPlot, left, right, lo, hi };
    svg.setPointerCapture(event.pointerId);
    event.preventDefault();
  });
  chart.addEventListener("pointermove", (event) => {
    if (!drag) return;
    const x = drag.toPlot(event.clientX);
    drag.band.setAttribute("x", String(Math.min(drag.start, x)));
    drag.band.setAttribute("width", String(Math.abs(x - drag.start)));
  });
  chart.addEventListener("pointerup", (event) => {
    if (!drag) return;
    const d = drag;
    drag = null;
    d.band.remove();
    const end = d.toPlot(event.clientX);
    // A click, not a drag.
    if (Math.abs(end - d.start) < 4) return;
    const value = (x) => d.lo + ((x - d.left) / (d.right - d.left)) * (d.hi - d.lo);
    const [lo, hi] = [value(Math.min(d.start, end)), value(Math.max(d.start, end))];
    const set = (name, v) => { controls.elements[name].value = v; };
    if (controls.elements.x.value === "time") {
      // Seconds since submission, to a tenth.
      set("from_s", String(Math.max(0, Math.floor(lo * 10) / 10)));
      set("to_s", String(Math.ceil(hi * 10) / 10));
      set("from", ""); set("to", "");
    } else {
      set("from", String(Math.max(0, Math.floor(lo))));
      set("to", String(Math.ceil(hi)));
      set("from_s", ""); set("to_s", "");
    }
    redrawChart(true);
  });
  controls.addEventListener("change", () => redrawChart(true));
  controls.addEventListener("input", scheduleChart);

  const logs = document.getElementById("logs");
  const follow = document.getElementById("follow");
  if (follow.checked) logs.scrollTop = logs.scrollHeight;
  if (window.EventSource) {
    const source = new EventSource(root.dataset.live);
    source.addEventListener("summary", (event) => {
      const summary = document.getElementById("job-summary");
      summary.innerHTML = event.data;
      localTimes(summary);
    });
    source.addEventListener("events", (event) => {
      const events = document.getElementById("job-events");
      events.innerHTML = event.data;
      localTimes(events);
    });
    source.addEventListener("log", (event) => {
      const lines = JSON.parse(event.data);
      logs.append(document.createTextNode(lines.join("\n") + "\n"));
      // Keep the page light: the last 5,000 lines.
      const text = logs.textContent;
      const all = text.split("\n");
      if (all.length > 5000) logs.textContent = all.slice(-5000).join("\n");
      if (follow.checked) logs.scrollTop = logs.scrollHeight;
    });
    source.addEventListener("metrics", (event) => {
      // The first points bring the metrics' names: checkboxes for them, loss and accuracy ticked.
      const { names } = JSON.parse(event.data);
      const fieldset = controls.querySelector("fieldset");
      if (names.length && !controls.querySelector("input[name=metric]")) {
        fieldset.querySelectorAll(".muted").forEach((el) => el.remove());
        for (const name of names) {
          const label = document.createElement("label");
          const box = document.createElement("input");
          Object.assign(box, { type: "checkbox", name: "metric", value: name });
          box.checked = name === "loss" || name === "accuracy";
          label.append(box, ` ${name}`);
          fieldset.append(label);
        }
      }
      scheduleChart();
    });
    source.addEventListener("end", () => source.close());
  }

  const paths = {
    cancel: `/api/v1/jobs/${id}/cancel`,
    pause: `/api/v1/jobs/${id}/pause`,
    resume: `/api/v1/jobs/${id}/resume`,
    checkpoint: `/api/v1/jobs/${id}/checkpoint`,
  };
  // What each action did, said after the page reloads.
  const done = {
    cancel: () => "Cancelled.",
    pause: () => "Pausing: its tasks checkpoint and stop, and its GPUs go back to the cluster.",
    resume: () => "Resumed: the job is queued again and carries on from its last checkpoint.",
    checkpoint: (reply) => `Asked ${reply.tasks} running task${reply.tasks === 1 ? "" : "s"} to write a checkpoint now; it is listed under Checkpoints once written.`,
  };
  document.querySelectorAll("button[data-action]").forEach((button) => {
    button.addEventListener("click", () => confirmed(button, async () => {
      const action = button.dataset.action;
      const reply = await api("POST", paths[action], {});
      flash(done[action](reply));
      location.reload();
    }));
  });
  const resize = document.getElementById("resize-form");
  if (resize) {
    resize.addEventListener("submit", (event) => {
      event.preventDefault();
      const button = resize.querySelector("button[type=submit]");
      const value = (name) => resize.elements[name].value;
      const body = { workers: { min: Number(value("workers_min")), max: Number(value("workers_max")) } };
      if (value("ps_min") !== "" || value("ps_max") !== "") {
        body.ps = { min: Number(value("ps_min") || 0), max: Number(value("ps_max") || value("ps_min") || 0) };
      }
      confirmed(button, async () => {
        const reply = await api("POST", `/api/v1/jobs/${id}/resize`, body);
        const span = (r) => (r.min === r.max ? `${r.min}` : `${r.min}–${r.max}`);
        const ps = body.ps ? `, PS ${span(body.ps)}` : "";
        const when = reply.job && reply.job.state === "running"
          ? "The scheduler rescales it at its next round, through a checkpoint."
          : "The scheduler uses the new ranges when it places the job.";
        flash(`Resized to workers ${span(body.workers)}${ps}. ${when}`);
        location.reload();
      });
    });
  }
}

// ---- Nodes (administrators): cordon, uncordon, drain.
function nodes() {
  document.querySelectorAll("button[data-node-action]").forEach((button) => {
    button.addEventListener("click", () => confirmed(button, async () => {
      const node = encodeURIComponent(button.dataset.node);
      await api("POST", `/api/v1/nodes/${node}/${button.dataset.nodeAction}`, {});
      location.reload();
    }));
  });
}

// ---- Tokens: create (the secret shown once) and revoke.
function tokens() {
  const form = document.getElementById("token-form");
  if (!form) return;
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const button = form.querySelector("button");
    confirmed(button, async () => {
      const body = { name: form.elements.name.value };
      if (form.elements.days.value) body.expires_in = `${form.elements.days.value}d`;
      const created = await api("POST", "/api/v1/tokens", body);
      document.getElementById("new-token-secret").textContent = created.secret;
      const expires = created.token.expires_at ? new Date(created.token.expires_at) : null;
      const asked = body.expires_in ? new Date(Date.now() + Number(form.elements.days.value) * 86400000) : null;
      let expiry = expires ? `It expires ${expires.toLocaleString()}.` : "It does not expire.";
      if (expires && (!asked || expires < asked - 60000)) {
        expiry += " That is earlier than asked: a token never outlives the session or token that made it.";
      }
      document.getElementById("new-token-expiry").textContent = expiry;
      document.getElementById("new-token").hidden = false;
      form.reset();
    });
  });
  document.querySelectorAll("button[data-revoke]").forEach((button) => {
    button.addEventListener("click", () => confirmed(button, async () => {
      await api("DELETE", `/api/v1/tokens/${button.dataset.revoke}`);
      location.reload();
    }));
  });
}

// ---- Tenants (cluster administrators): add a tenant or change its quota, keeping its quotas per
// GPU model. Users (a tenant's admins): add one, with a first token shown once.
function administration() {
  const tenantForm = document.getElementById("tenant-form");
  if (tenantForm) {
    const quotaOf = (name) => {
      const row = document.querySelector(`tr[data-tenant="${CSS.escape(name)}"]`);
      return row ? JSON.parse(row.dataset.quota) : null;
    };
    // Naming an existing tenant fills in its quota.
    tenantForm.elements.name.addEventListener("input", () => {
      const quota = quotaOf(tenantForm.elements.name.value);
      if (!quota) return;
      tenantForm.elements.guaranteed.value = quota.guaranteed_gpus;
      tenantForm.elements.max.value = quota.max_gpus ?? "";
    });
    tenantForm.addEventListener("submit", (event) => {
      event.preventDefault();
      const button = tenantForm.querySelector("button");
      confirmed(button, async () => {
        const name = tenantForm.elements.name.value;
        const max = tenantForm.elements.max.value;
        const quota = {
          guaranteed_gpus: Number(tenantForm.elements.guaranteed.value || 0),
          max_gpus: max === "" ? null : Number(max),
        };
        const existing = quotaOf(name);
        const limit = quota.max_gpus === null ? "no limit" : `at most ${quota.max_gpus}`;
        const gpus = `${quota.guaranteed_gpus} GPU${quota.guaranteed_gpus === 1 ? "" : "s"}`;
        if (existing) {
          await api("PUT", `/api/v1/tenants/${encodeURIComponent(name)}/quota`, { ...quota, flavours: existing.flavours || [] });
          flash(`The quota of ${name}: ${gpus} guaranteed, ${limit}.`);
        } else {
          await api("POST", "/api/v1/tenants", { name, quota });
          flash(`Added tenant ${name}: ${gpus} guaranteed, ${limit}.`);
        }
        location.reload();
      });
    });
  }
  const userForm = document.getElementById("user-form");
  if (userForm) {
    userForm.addEventListener("submit", (event) => {
      event.preventDefault();
      const button = userForm.querySelector("button");
      confirmed(button, async () => {
        const body = { name: userForm.elements.name.value, role: userForm.elements.role.value };
        if (userForm.elements.tenant) body.tenant = userForm.elements.tenant.value;
        const created = await api("POST", "/api/v1/users", body);
        const token = await api("POST", "/api/v1/tokens", { name: "first sign-in", user_id: created.user.id });
        const expires = token.token.expires_at ? ` It expires ${new Date(token.token.expires_at).toLocaleString()}.` : "";
        document.getElementById("new-user-said").textContent =
          `Added ${created.user.name} to ${created.user.tenant} as ${created.user.role}. Give them this token to sign in with; it is shown once.${expires}`;
        document.getElementById("new-user-secret").textContent = token.secret;
        document.getElementById("new-user").hidden = false;
        const row = document.querySelector("#users tbody").insertRow();
        for (const text of [created.user.name, created.user.tenant, created.user.role, "just now"]) {
          row.insertCell().textContent = text;
        }
        userForm.reset();
      });
    });
  }
}

// ---- An experiment's page: its pause, resume and cancel buttons.
function experimentPage() {
  const root = document.getElementById("experiment");
  if (!root) return;
  const id = root.dataset.experiment;
  document.querySelectorAll("button[data-experiment-action]").forEach((button) => {
    button.addEventListener("click", () => confirmed(button, async () => {
      await api("POST", `/api/v1/experiments/${id}/${button.dataset.experimentAction}`, {});
      location.reload();
    }));
  });
  // The trials table filtered by what a row says (a state, a choice, a value), as typed.
  const filter = document.getElementById("trials-filter");
  const applyFilter = () => {
    const text = filter.value.trim().toLowerCase();
    const rows = [...document.querySelectorAll("#trials-rows tr")];
    let shown = 0;
    for (const row of rows) {
      row.hidden = text !== "" && !row.textContent.toLowerCase().includes(text);
      if (!row.hidden) shown += 1;
    }
    document.getElementById("trials-shown").textContent = text ? `${shown} of ${rows.length} trials shown.` : "";
  };
  if (filter) {
    document.getElementById("trials-filter-label").hidden = false;
    filter.addEventListener("input", applyFilter);
  }
  // While it runs, its facts, charts and trials are read again every 3 s (ticked trials and the
  // chosen sort kept); once it ends, the page reloads once for its final state and buttons.
  if (root.dataset.live !== "true") return;
  const timer = setInterval(async () => {
    if (document.hidden) return;
    const response = await fetch(location.href, { credentials: "same-origin" });
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    const freshRoot = fresh.getElementById("experiment");
    if (!freshRoot || freshRoot.dataset.live !== "true") {
      clearInterval(timer);
      location.reload();
      return;
    }
    const chosen = new Set([...root.querySelectorAll("input[name=job]:checked")].map((i) => i.value));
    for (const part of fresh.querySelectorAll("[data-refresh]")) {
      const here = document.getElementById(part.id);
      if (here) here.innerHTML = part.innerHTML;
    }
    for (const input of root.querySelectorAll("input[name=job]")) input.checked = chosen.has(input.value);
    localTimes(root);
    resort(document.getElementById("trials"));
    if (filter) applyFilter();
  }, 3000);
}

// ---- A job's whole log: the newest page follows the job's new lines (the API's followed log,
// filtered as the page is), keeping the page to its last 5,000 lines.
function logPage() {
  const pre = document.getElementById("log-lines");
  if (!pre || !pre.dataset.follow || !window.ReadableStream) return;
  const search = (new URLSearchParams(location.search).get("q") || "").toLowerCase();
  const pad = (n, w) => String(n).padStart(w || 2, "0");
  const append = (line) => {
    const t = new Date(line.time);
    const span = document.createElement("span");
    span.id = `L${line.id}`;
    if (line.stream === "stderr") span.className = "log-stderr";
    const meta = document.createElement("span");
    meta.className = "log-meta";
    meta.textContent = `${pad(t.getUTCHours())}:${pad(t.getUTCMinutes())}:${pad(t.getUTCSeconds())}.${pad(t.getUTCMilliseconds(), 3)} g${line.generation} ${line.task}`;
    span.append(meta, " ");
    // The search's matches marked, as the server marks them.
    let rest = line.line;
    while (search && rest.toLowerCase().includes(search)) {
      const at = rest.toLowerCase().indexOf(search);
      const mark = document.createElement("mark");
      mark.textContent = rest.slice(at, at + search.length);
      span.append(rest.slice(0, at), mark);
      rest = rest.slice(at + search.length);
    }
    span.append(rest + "\n");
    pre.append(span);
  };
  const follow = async () => {
    const atBottom = () => pre.scrollHeight - pre.scrollTop - pre.clientHeight < 40;
    pre.scrollTop = pre.scrollHeight;
    let url = pre.dataset.follow;
    for (;;) {
      let response;
      try { response = await fetch(url, { credentials: "same-origin" }); } catch (_) { return; }
      if (!response.ok || !response.body) return;
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        const lines = buffer.split("\n");
        buffer = lines.pop();
        const bottom = atBottom();
        for (const text of lines) {
          if (!text) continue;
          const line = JSON.parse(text);
          append(line);
          url = url.replace(/cursor=\d+/, `cursor=${line.id}`);
        }
        while (pre.childElementCount > 5000) pre.firstElementChild.remove();
        if (bottom) pre.scrollTop = pre.scrollHeight;
      }
      // The stream ended: the job finished, or the server ended a long stream; ask whether to go on.
      const job = await fetch(`/api/v1/jobs/${url.split("/")[4]}`, { credentials: "same-origin" });
      if (!job.ok) return;
      const state = (await job.json()).job.state;
      if (["succeeded", "failed", "cancelled"].includes(state)) {
        const note = document.getElementById("log-follow");
        if (note) note.textContent = `The job has ${state}; this is the end of its log.`;
        return;
      }
    }
  };
  follow();
}

// ---- Submit: a file loads into the editor.
function submitPage() {
  const file = document.getElementById("document-file");
  if (!file) return;
  file.addEventListener("change", async () => {
    if (file.files.length) document.getElementById("document").value = await file.files[0].text();
  });
}

document.addEventListener("DOMContentLoaded", () => {
  localTimes();
  setInterval(() => localTimes(), 30000);
  showFlash();
  login();
  sortable();
  jobsList();
  bulkActions();
  jobPage();
  logPage();
  experimentPage();
  nodes();
  tokens();
  administration();
  submitPage();
});
