/**
 * `deploy/`: the two Dockerfiles and the controller's RBAC. No container builder runs here, so
 * the Dockerfiles are linted (dockerfile-utils, the linter of the VS Code Docker extension) and
 * parsed (dockerfile-ast) and held to what reins needs of them; the RBAC objects are validated
 * against the Kubernetes OpenAPI schema.
 */
import assert from "node:assert/strict";
import { load, loadAll } from "js-yaml";
import { DockerfileParser } from "dockerfile-ast";
import { validate } from "dockerfile-utils";
import { CLI_ADAPTERS } from "../lib/harness/cli/registry.ts";
import { VERIFIER_COMMAND } from "../lib/controller/k8s_pod.ts";
import { schemaErrors } from "../lib/controller/k8s_schema.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const read = (path: string) => Deno.readTextFileSync(`${ROOT}${path}`);

function parse(path: string) {
  const text = read(path);
  const file = DockerfileParser.parse(text);
  const instructions = file.getInstructions().map((i) => ({
    keyword: i.getKeyword(),
    args: i.getArguments().map((a) => a.getValue()),
    text: i.getArgumentsContent() ?? "",
  }));
  return { text, file, instructions };
}

function exists(path: string): boolean {
  try {
    Deno.statSync(`${ROOT}${path}`);
    return true;
  } catch {
    return false;
  }
}

/** What a build context keeps under a `**` + `!path` ignore file. */
function kept(ignore: string, path: string): boolean {
  const lines = ignore.split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));
  let keep = true;
  for (const line of lines) {
    const negated = line.startsWith("!");
    const pattern = (negated ? line.slice(1) : line).replace(/\/$/, "");
    const hit = pattern === "**" || path === pattern || path.startsWith(`${pattern}/`);
    if (hit) keep = negated;
  }
  return keep;
}

for (const name of ["runner", "trainer"]) {
  Deno.test(`deploy: ${name}.Dockerfile lints clean, copies what exists and the context keeps`, () => {
    const { text, instructions } = parse(`deploy/${name}.Dockerfile`);
    assert.deepEqual(validate(text).map((d) => d.message), []);
    const ignore = read(`deploy/${name}.Dockerfile.dockerignore`);
    for (const copy of instructions.filter((i) => i.keyword === "COPY")) {
      for (const source of copy.args.slice(0, -1)) {
        const path = source.replace(/^\.\//, "").replace(/\/$/, "");
        assert.ok(exists(path), `${name}: COPY ${path}: no such path in the repository`);
        assert.ok(kept(ignore, path), `${name}: COPY ${path}: excluded by the ignore file`);
      }
    }
    const user = instructions.filter((i) => i.keyword === "USER").at(-1);
    assert.ok(user && user.args[0] !== "root" && user.args[0] !== "0", `${name}: runs as root`);
    const from = instructions.find((i) => i.keyword === "FROM")!;
    assert.doesNotMatch(from.text, /:latest\b/);
  });
}

Deno.test("deploy: the linter is not vacuous (a broken Dockerfile has findings)", () => {
  const findings = validate("FROM\nRUN\nEXPOSE abc\nFOO bar\n").map((d) => d.message);
  assert.deepEqual(findings, [
    "Instruction has no arguments",
    "Invalid containerPort: abc",
    "Unknown instruction: FOO",
  ]);
});

Deno.test("deploy: the runner image pins the tested Deno, installs reins' CLIs, runs the verifier", () => {
  const { file, instructions } = parse("deploy/runner.Dockerfile");
  const args = Object.fromEntries(
    file.getARGs().map((a) => [a.getProperty()!.getName(), a.getProperty()!.getValue()]),
  );
  assert.equal(args.DENO_VERSION, Deno.version.deno, "the image's Deno is the one tested here");
  assert.equal(file.getFROMs()[0].getImageName(), "denoland/deno");
  assert.equal(args.HARNESSES, "", "no CLI unless asked for");
  // The names the build argument takes are the registry's, installed through ensureCli.
  const documented = read("deploy/runner.Dockerfile").match(/# opencode, .*\n/)![0];
  for (const cli of Object.keys(CLI_ADAPTERS)) assert.match(documented, new RegExp(cli));
  const install = instructions.find((i) => i.keyword === "RUN" && i.text.includes("ensureCli"));
  assert.match(install!.text, /cliAdapter\('\$harness'\)/);
  assert.ok(instructions.some((i) => i.keyword === "RUN" && /\bgit\b/.test(i.text)), "git");
  // The command the backend gives its verifier containers exists in the image at that path.
  const script = VERIFIER_COMMAND.at(-1)!;
  assert.ok(script.startsWith("/opt/reins/"));
  assert.equal(instructions.find((i) => i.keyword === "WORKDIR")!.args[0], "/opt/reins");
  assert.ok(exists(script.slice("/opt/reins/".length)));
});

Deno.test("deploy: the trainer image runs the worker on 8300 over the base image's torch", () => {
  const { file, instructions } = parse("deploy/trainer.Dockerfile");
  const torchImage = file.getARGs().find((a) => a.getProperty()!.getName() === "TORCH_IMAGE")!;
  assert.match(torchImage.getProperty()!.getValue()!, /^pytorch\/pytorch:\d+\.\d+\.\d+-/);
  assert.deepEqual(instructions.find((i) => i.keyword === "EXPOSE")!.args, ["8300"]);
  const entry = instructions.find((i) => i.keyword === "ENTRYPOINT")!;
  assert.deepEqual(JSON.parse(entry.text), ["python3", "-m", "reins_worker"]);
  assert.ok(exists("lib/trainer/worker/reins_worker/__main__.py"));
  const pip = instructions.find((i) => i.keyword === "RUN" && i.text.includes("pip install"))!;
  assert.match(pip.text, /--no-deps \./, "torch is not replaced by a wheel from the index");
});

Deno.test("deploy: the RBAC objects validate and the Role reads no Secret", () => {
  const docs = loadAll(read("deploy/k8s/rbac.yaml")) as Array<Record<string, unknown>>;
  assert.deepEqual(docs.map((d) => d.kind), [
    "ServiceAccount",
    "ServiceAccount",
    "Role",
    "RoleBinding",
  ]);
  for (const doc of docs) assert.deepEqual(schemaErrors(doc), [], JSON.stringify(doc));
  const role = docs[2] as { rules: Array<{ resources: string[]; verbs: string[] }> };
  for (const rule of role.rules.filter((r) => r.resources.includes("secrets"))) {
    assert.ok(!rule.verbs.some((v) => ["get", "list", "watch", "*"].includes(v)));
  }
  // Not vacuous: a misspelt field is caught.
  const bad = load("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x}\nautomount: false\n");
  assert.deepEqual(schemaErrors(bad as Record<string, unknown>), ["automount: unknown field"]);
});
