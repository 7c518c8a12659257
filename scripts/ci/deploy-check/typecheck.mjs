// Type-checks Grafana dashboards against Grafana's schema (@grafana/schema, see grafana-types.ts)
// and Prometheus Operator custom resources against their models' TypeScript interfaces
// (@kubernetes-models/prometheus-operator), with `tsc --noEmit`.
//
//   node typecheck.mjs --dashboard a.json ... --cr b.yaml ...
//
// Each input becomes an object literal in a generated .ts file (build/checks/), checked with
// `satisfies <Type>`: field types, enum values and unknown keys are all checked (a JSON module
// import would be widened and never checked for unknown keys). Then deliberately broken copies
// (build/mutants/) are type-checked too, and the check fails unless tsc rejects every one of them:
// that shows the check can fail.
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { basename, dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const here = dirname(fileURLToPath(import.meta.url));
const build = join(here, "build");
const tsc = join(here, "node_modules", ".bin", "tsc");

const CR_TYPES = {
  ServiceMonitor: "IServiceMonitor",
  PrometheusRule: "IPrometheusRule",
  PodMonitor: "IPodMonitor",
};

function parseArgs(argv) {
  const out = { dashboard: [], cr: [] };
  let kind = null;
  for (const a of argv) {
    if (a === "--dashboard") kind = "dashboard";
    else if (a === "--cr") kind = "cr";
    else if (kind) out[kind].push(a);
    else throw new Error(`unexpected argument ${a}`);
  }
  return out;
}

const clone = (v) => JSON.parse(JSON.stringify(v));

function dashboardSource(obj, importPath) {
  return (
    `import type { StrictDashboard } from "${importPath}";\n` +
    `export const dashboard = ${JSON.stringify(obj, null, 2)} satisfies StrictDashboard;\n`
  );
}

function crSource(obj) {
  const type = CR_TYPES[obj.kind];
  return (
    `import type { ${type} } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/${obj.kind}";\n` +
    `export const resource = ${JSON.stringify(obj, null, 2)} satisfies ${type};\n`
  );
}

// Deliberately broken copies of a dashboard: each must fail to type-check.
function dashboardMutants(d) {
  const m = [];
  const firstOf = (x, type) => x.panels.find((p) => p.type === type);
  const add = (name, f) => {
    const c = clone(d);
    if (f(c) !== false) m.push([name, c]);
  };
  add("gridPos.h is a string", (c) => {
    const p = c.panels.find((p) => p.type !== "row");
    p.gridPos.h = String(p.gridPos.h);
  });
  add("schemaVersion is a string", (c) => {
    c.schemaVersion = String(c.schemaVersion);
  });
  add("unknown dashboard key", (c) => {
    c.refreshh = "30s";
  });
  add("target expr is a number", (c) => {
    c.panels.find((p) => p.targets?.length).targets[0].expr = 42;
  });
  add("unknown key in a timeseries' custom field config", (c) => {
    const p = firstOf(c, "timeseries");
    if (!p) return false;
    p.fieldConfig.defaults.custom.lineWidht = 1;
  });
  add("color mode not in FieldColorModeId", (c) => {
    const p = firstOf(c, "timeseries");
    if (!p) return false;
    p.fieldConfig.defaults.color = { mode: "palette-clasic" };
  });
  add("stat-only option on a timeseries panel", (c) => {
    const p = firstOf(c, "timeseries");
    if (!p) return false;
    p.options.textMode = "auto";
  });
  add("stat colorMode not in BigValueColorMode", (c) => {
    const p = firstOf(c, "stat");
    if (!p) return false;
    p.options.colorMode = "rainbow";
  });
  add("heatmap option of the wrong type", (c) => {
    const p = firstOf(c, "heatmap");
    if (!p) return false;
    p.options.calculate = "no";
  });
  add("table option missing", (c) => {
    const p = firstOf(c, "table");
    if (!p) return false;
    delete p.options.showHeader;
  });
  add("variable type unknown", (c) => {
    c.templating.list[0].type = "querry";
  });
  return m;
}

function crMutants(obj) {
  const m = [];
  const c = clone(obj);
  if (obj.kind === "ServiceMonitor") {
    const a = clone(obj);
    a.spec.endpoints[0].interval = 15;
    m.push(["ServiceMonitor interval is a number", a]);
    c.spec.endpoint = c.spec.endpoints;
    m.push(["ServiceMonitor unknown spec key", c]);
  } else if (obj.kind === "PrometheusRule") {
    const rule = c.spec.groups.flatMap((g) => g.rules).find((r) => r.alert);
    rule.alrt = rule.alert;
    m.push(["PrometheusRule unknown rule key", c]);
  }
  return m;
}

function runTsc(project) {
  try {
    execFileSync(tsc, ["-p", project, "--pretty", "false"], { encoding: "utf8", stdio: "pipe" });
    return "";
  } catch (e) {
    if (typeof e.status !== "number") throw e;
    return `${e.stdout ?? ""}${e.stderr ?? ""}`;
  }
}

function writeProject(name, files) {
  const tsconfig = join(build, `tsconfig.${name}.json`);
  writeFileSync(
    tsconfig,
    JSON.stringify(
      { extends: "../tsconfig.json", include: ["../grafana-types.ts", ...files.map((f) => relative(build, f))] },
      null,
      2,
    ),
  );
  return tsconfig;
}

function errorsByFile(output) {
  const byFile = new Map();
  for (const line of output.split("\n")) {
    const m = /^(.+?\.ts)\(\d+,\d+\): error /.exec(line);
    if (!m) continue;
    const f = m[1].replace(/^.*build\//, "build/");
    byFile.set(f, [...(byFile.get(f) ?? []), line]);
  }
  return byFile;
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  rmSync(build, { recursive: true, force: true });
  mkdirSync(join(build, "checks"), { recursive: true });
  mkdirSync(join(build, "mutants"), { recursive: true });

  const checks = []; // [file, description]
  const mutants = [];
  let n = 0;
  const slug = (s) => `${String(++n).padStart(3, "0")}-${s.replace(/[^A-Za-z0-9]+/g, "-")}`;

  for (const path of args.dashboard) {
    const d = JSON.parse(readFileSync(path, "utf8"));
    const f = join(build, "checks", `${slug(basename(path))}.ts`);
    writeFileSync(f, dashboardSource(d, "../../grafana-types.js"));
    checks.push([f, `${path} (dashboard ${d.uid})`]);
    for (const [name, m] of dashboardMutants(d)) {
      const mf = join(build, "mutants", `${slug(name)}.ts`);
      writeFileSync(mf, dashboardSource(m, "../../grafana-types.js"));
      mutants.push([mf, `${basename(path)}: ${name}`]);
    }
  }
  const mutatedKinds = new Set();
  for (const path of args.cr) {
    const docs = parseAllDocuments(readFileSync(path, "utf8"));
    for (const doc of docs) {
      if (doc.errors.length) throw new Error(`${path}: ${doc.errors[0].message}`);
      const obj = doc.toJS();
      if (!obj || !CR_TYPES[obj.kind]) continue;
      const f = join(build, "checks", `${slug(`${basename(path)}-${obj.kind}`)}.ts`);
      writeFileSync(f, crSource(obj));
      checks.push([f, `${path} (${obj.kind} ${obj.metadata?.name})`]);
      if (!mutatedKinds.has(obj.kind)) {
        mutatedKinds.add(obj.kind);
        for (const [name, m] of crMutants(obj)) {
          const mf = join(build, "mutants", `${slug(name)}.ts`);
          writeFileSync(mf, crSource(m));
          mutants.push([mf, `${basename(path)}: ${name}`]);
        }
      }
    }
  }
  if (checks.length === 0) throw new Error("nothing to check");

  let failed = false;
  const out = runTsc(writeProject("checks", checks.map(([f]) => f)));
  const errs = errorsByFile(out);
  for (const [f, what] of checks) {
    const e = errs.get(relative(here, f)) ?? [];
    console.log(`${e.length ? "FAIL" : "ok  "} types: ${what}`);
    for (const l of e) console.log(`       ${l}`);
    failed ||= e.length > 0;
  }
  if (!errs.size && out.trim()) {
    console.log(out);
    failed = true;
  }

  const mout = runTsc(writeProject("mutants", mutants.map(([f]) => f)));
  const merrs = errorsByFile(mout);
  for (const [f, what] of mutants) {
    const e = merrs.get(relative(here, f)) ?? [];
    console.log(`${e.length ? "ok  " : "FAIL"} rejects broken copy: ${what}${e.length ? "" : " (tsc accepted it)"}`);
    failed ||= e.length === 0;
  }
  console.log(`typecheck: ${checks.length} files checked, ${mutants.length} broken copies rejected${failed ? " -- FAILED" : ""}`);
  process.exit(failed ? 1 : 0);
}

main();
