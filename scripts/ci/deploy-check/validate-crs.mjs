// Validates Prometheus Operator custom resources (ServiceMonitor, PrometheusRule, PodMonitor)
// against the CRDs' OpenAPI schemas, with the models of @kubernetes-models/prometheus-operator
// (their validate() runs the schema: types, required fields, patterns such as durations).
// Unknown keys are caught by typecheck.mjs (the schemas here allow them).
//
//   node validate-crs.mjs file.yaml ...      (multi-document YAML; other kinds are skipped)
// Exits 1 if a resource is invalid or no custom resource was found at all.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { PodMonitor, PrometheusRule, ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";

const MODELS = { ServiceMonitor, PrometheusRule, PodMonitor };
let failed = false;
let count = 0;
for (const path of process.argv.slice(2)) {
  for (const doc of parseAllDocuments(readFileSync(path, "utf8"))) {
    if (doc.errors.length) {
      console.log(`FAIL ${path}: YAML: ${doc.errors[0].message}`);
      failed = true;
      continue;
    }
    const obj = doc.toJS();
    if (!obj || !obj.kind) continue;
    const Model = MODELS[obj.kind];
    if (!Model || obj.apiVersion !== Model.apiVersion) continue;
    count++;
    const what = `${path} (${obj.kind} ${obj.metadata?.name})`;
    try {
      new Model(obj).validate();
      console.log(`ok   CR schema: ${what}`);
    } catch (e) {
      console.log(`FAIL CR schema: ${what}: ${e.message}`);
      failed = true;
    }
  }
}
// The validator itself must reject a broken resource.
try {
  new ServiceMonitor({ metadata: { name: "x" }, spec: { selector: {}, endpoints: [{ port: "m", interval: 15 }] } }).validate();
  console.log("FAIL CR schema: a ServiceMonitor with a numeric interval was accepted");
  failed = true;
} catch {
  // expected
}
if (count === 0) {
  console.log("FAIL CR schema: no custom resources found");
  failed = true;
}
console.log(`validate-crs: ${count} custom resources${failed ? " -- FAILED" : " valid"}`);
process.exit(failed ? 1 : 0);
