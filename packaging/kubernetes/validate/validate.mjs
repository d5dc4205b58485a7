// Validates every object of rendered Kubernetes manifests (multi-document YAML files) against the
// API schemas shipped in the kubernetes-models packages: Kubernetes, Prometheus Operator and
// cert-manager. Offline: the schemas are compiled validators inside node_modules.
//
//   node validate.mjs FILE...   -> one line per object; exit 0 all valid, 1 any invalid, 2 usage
//
// Strict like kubeconform -strict: the schemas do not forbid unknown fields, so a misspelt field
// (hostNetwrok) would pass silently and the API server would drop it. Each object is therefore
// wrapped in a Proxy that records which fields the compiled validator looks up; a field present in
// an object whose schema names its properties (the validator looked up at least one name there)
// and never looked up is reported as unknown. Maps (labels, data) are iterated by the validator,
// and free-form objects are never looked into; neither is reported.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { runValidateFunc } from "@kubernetes-models/validate";

// apiVersion group -> the package holding its models.
const kPackages = {
  "": "kubernetes-models",
  apps: "kubernetes-models",
  "monitoring.coreos.com": "@kubernetes-models/prometheus-operator",
  "cert-manager.io": "@kubernetes-models/cert-manager",
};

async function ModelFor(apiVersion, kind) {
  const slash = apiVersion.indexOf("/");
  const group = slash < 0 ? "" : apiVersion.slice(0, slash);
  const pkg = kPackages[group];
  if (!pkg) throw new Error(`no schema package for API group "${group}" (add it to kPackages)`);
  const path = `${pkg}/${apiVersion}/${kind}`;
  let mod;
  try {
    mod = await import(path);
  } catch (e) {
    throw new Error(`no schema for ${apiVersion} ${kind} (${path})`);
  }
  return mod[kind];
}

// Wraps `value` so that reads of its fields are recorded in `seen` (Map: object -> {looked,
// iterated, keys}); returns the proxy tree and fills `objects` with [path, target] pairs.
function Track(value, path, seen, objects) {
  if (value === null || typeof value !== "object") return value;
  const target = Array.isArray(value) ? [] : {};
  for (const [k, v] of Object.entries(value)) target[k] = Track(v, `${path}/${k}`, seen, objects);
  if (Array.isArray(value)) return target;
  const record = { looked: new Set(), iterated: false };
  seen.set(target, record);
  objects.push([path, target]);
  return new Proxy(target, {
    get(t, key, receiver) {
      if (typeof key === "string") record.looked.add(key);
      return Reflect.get(t, key, receiver);
    },
    has(t, key) {
      if (typeof key === "string") record.looked.add(key);
      return Reflect.has(t, key);
    },
    ownKeys(t) {
      record.iterated = true;
      return Reflect.ownKeys(t);
    },
    getOwnPropertyDescriptor(t, key) {
      record.iterated = true;
      return Reflect.getOwnPropertyDescriptor(t, key);
    },
  });
}

function UnknownFields(seen, objects) {
  const unknown = [];
  for (const [path, target] of objects) {
    const r = seen.get(target);
    if (r.iterated || r.looked.size === 0) continue;
    for (const key of Object.keys(target)) {
      if (!r.looked.has(key)) unknown.push(`${path}/${key}`);
    }
  }
  return unknown;
}

async function ValidateObject(obj) {
  const Model = await ModelFor(obj.apiVersion, obj.kind);
  const seen = new Map();
  const objects = [];
  const tracked = Track(obj, "", seen, objects);
  const problems = [];
  try {
    runValidateFunc((data) => Model.prototype.validate.call(data), tracked);
  } catch (e) {
    problems.push(e.message);
  }
  for (const f of UnknownFields(seen, objects)) problems.push(`unknown field ${f}`);
  return problems;
}

async function Main(files) {
  if (files.length === 0) {
    console.error("usage: node validate.mjs RENDERED.yaml...");
    return 2;
  }
  let bad = 0;
  let count = 0;
  for (const file of files) {
    for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
      if (doc.errors.length) {
        console.log(`FAIL ${file}: YAML: ${doc.errors[0].message}`);
        bad++;
        continue;
      }
      const obj = doc.toJS();
      if (obj === null) continue;
      count++;
      const name = `${obj.apiVersion} ${obj.kind} ${obj.metadata?.namespace ?? "-"}/${obj.metadata?.name}`;
      let problems;
      try {
        problems = await ValidateObject(obj);
      } catch (e) {
        problems = [e.message];
      }
      if (problems.length) {
        bad++;
        console.log(`FAIL ${file}: ${name}`);
        for (const p of problems) console.log(`  ${p}`);
      } else {
        console.log(`ok   ${file}: ${name}`);
      }
    }
  }
  console.log(`${count - bad} valid, ${bad} invalid`);
  return bad || count === 0 ? 1 : 0;
}

process.exitCode = await Main(process.argv.slice(2));
