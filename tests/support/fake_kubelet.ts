/**
 * The kubelet of the fake API server (`fake_k8s.ts`): runs a Pod's containers the way a node
 * does — volumes mounted first (a Pod waits while a ConfigMap or Secret it mounts is missing),
 * the image pulled (an image listed as unpullable leaves the container waiting in
 * `ErrImagePull`), init containers one after another (the next starts only when the previous
 * exited 0; a failure fails the Pod, `restartPolicy: Never`), then the regular containers;
 * each container's status goes waiting → running → terminated with its exit code and
 * termination message.
 *
 * Containers run one of two ways:
 * - `script`: the Job's script says how the agent (its first container not named `reins-*`)
 *   ends; every other container exits 0 at once;
 * - `exec`: the container's command really runs, under bubblewrap, on the host's root (the image
 *   is not modelled): each volume is a directory bind-mounted at its mount path (read-only when
 *   the mount is, `subPath` too), ConfigMaps and Secrets written into theirs with the items'
 *   paths and modes, `/dev/termination-log` a file read back as the termination message, `/tmp`
 *   private. The host's `/tmp` is not visible, so one container cannot read another's volumes
 *   except through its own mounts. The network is the host's: NetworkPolicies are stored, not
 *   enforced.
 *
 * @module
 */
import type { K8sObject } from "./fake_k8s.ts";

/** How a scripted Job's agent ends. */
export type JobScript =
  | { exit_code: number; logs?: string; delay_ms?: number }
  | { hang: true; logs?: string };

/** What the kubelet needs from the API server. */
export interface KubeletHost {
  /** A ConfigMap or Secret by namespace and name (Secrets with `data` in base64). */
  object(kind: "ConfigMap" | "Secret", namespace: string, name: string): K8sObject | undefined;
  /** Called after every status change of the pod. */
  changed(pod: K8sObject): void;
  unpullable: Set<string>;
  mode: "script" | "exec";
  script: (job: K8sObject) => JobScript;
  /** Host paths every container sees read-only (what the images would hold: a task's files). */
  imagePaths: string[];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const HOST_DIRS = ["/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc", "/opt"];

/** Runs one pod; `stop()` kills what runs (deletion, deadline). */
export class PodRun {
  readonly logs = new Map<string, string>();
  #abort = new AbortController();
  #dir: string | null = null;
  #stopped = false;

  constructor(
    readonly pod: K8sObject,
    readonly job: K8sObject | null,
    readonly host: KubeletHost,
  ) {}

  stop(): void {
    this.#stopped = true;
    this.#abort.abort();
  }

  get stopped(): boolean {
    return this.#stopped;
  }

  #status(name: string): K8sObject {
    const all = [
      ...(this.pod.status.initContainerStatuses ?? []),
      ...this.pod.status.containerStatuses,
    ];
    return all.find((s: K8sObject) => s.name === name);
  }

  #set(name: string, state: K8sObject, extra: K8sObject = {}): void {
    Object.assign(this.#status(name), { state, ...extra });
    this.host.changed(this.pod);
  }

  /** Runs the pod to its end; resolves with the phase it ended in (or null when stopped). */
  async run(): Promise<"Succeeded" | "Failed" | null> {
    const spec = this.pod.spec;
    const waiting = (c: K8sObject) => ({
      name: c.name,
      image: c.image,
      imageID: "",
      ready: false,
      restartCount: 0,
      state: { waiting: { reason: "PodInitializing" } },
    });
    this.pod.status = {
      phase: "Pending",
      ...(spec.initContainers?.length
        ? { initContainerStatuses: spec.initContainers.map(waiting) }
        : {}),
      containerStatuses: spec.containers.map(waiting),
    };
    this.host.changed(this.pod);
    try {
      // Volumes: a pod whose ConfigMap or Secret is missing waits (FailedMount), as a node does.
      while (!this.#stopped && this.#missingVolume()) await sleep(20);
      for (const c of [...(spec.initContainers ?? []), ...spec.containers]) {
        if (this.host.unpullable.has(c.image)) {
          this.#set(c.name, {
            waiting: { reason: "ErrImagePull", message: `pull ${c.image}: not found` },
          });
          while (!this.#stopped) await sleep(50);
          return null;
        }
      }
      if (this.#stopped) return null;
      if (this.host.mode === "exec") this.#dir = await this.#volumes();
      this.pod.status.phase = spec.initContainers?.length ? "Pending" : "Running";
      for (const c of spec.initContainers ?? []) {
        const code = await this.#container(c);
        if (code === null) return null;
        if (code !== 0) return this.#end("Failed");
      }
      this.pod.status.phase = "Running";
      const codes = await Promise.all(spec.containers.map((c: K8sObject) => this.#container(c)));
      if (codes.includes(null)) return null;
      return this.#end(codes.every((c) => c === 0) ? "Succeeded" : "Failed");
    } finally {
      if (this.#dir) await Deno.remove(this.#dir, { recursive: true }).catch(() => {});
    }
  }

  #end(phase: "Succeeded" | "Failed"): "Succeeded" | "Failed" {
    this.pod.status.phase = phase;
    this.host.changed(this.pod);
    return phase;
  }

  #missingVolume(): boolean {
    return (this.pod.spec.volumes ?? []).some((v: K8sObject) =>
      (v.configMap && !v.configMap.optional &&
        !this.host.object("ConfigMap", this.pod.metadata.namespace, v.configMap.name)) ||
      (v.secret && !v.secret.optional &&
        !this.host.object("Secret", this.pod.metadata.namespace, v.secret.secretName))
    );
  }

  /** Runs one container; its exit code, or null when the pod was stopped. */
  async #container(c: K8sObject): Promise<number | null> {
    if (this.#stopped) return null;
    const startedAt = new Date().toISOString();
    this.#set(c.name, { running: { startedAt } }, { imageID: `sha256:${c.image}`, started: true });
    let code: number;
    let message = "";
    const agent = this.job && !c.name.startsWith("reins-") &&
      c.name === [...(this.pod.spec.initContainers ?? []), ...this.pod.spec.containers]
          .find((x: K8sObject) => !x.name.startsWith("reins-"))?.name;
    if (this.host.mode === "exec") {
      const out = await this.#exec(c);
      if (out === null) return null;
      ({ code, message } = out);
    } else if (agent) {
      const script = this.host.script(this.job!);
      this.logs.set(c.name, script.logs ?? "");
      if ("hang" in script) {
        while (!this.#stopped) await sleep(20);
        return null;
      }
      await sleep(script.delay_ms ?? 0);
      if (this.#stopped) return null;
      code = script.exit_code;
    } else {
      code = 0;
    }
    this.#set(c.name, {
      terminated: {
        exitCode: code,
        reason: code === 0 ? "Completed" : "Error",
        startedAt,
        finishedAt: new Date().toISOString(),
        ...(message ? { message } : {}),
      },
    }, { started: false });
    return code;
  }

  /** Writes each volume's directory (ConfigMap/Secret items with their modes). */
  async #volumes(): Promise<string> {
    const dir = await Deno.makeTempDir({ dir: "/tmp", prefix: "fake-kubelet-" });
    for (const v of this.pod.spec.volumes ?? []) {
      const path = `${dir}/volumes/${v.name}`;
      await Deno.mkdir(path, { recursive: true, mode: 0o777 });
      await Deno.chmod(path, 0o777);
      const source = v.configMap
        ? this.host.object("ConfigMap", this.pod.metadata.namespace, v.configMap.name)
        : v.secret
        ? this.host.object("Secret", this.pod.metadata.namespace, v.secret.secretName)
        : null;
      if (!source) continue;
      const ref = v.configMap ?? v.secret;
      const data: Record<string, string> = v.secret
        ? Object.fromEntries(
          Object.entries(source.data ?? {}).map(([k, b]) => [k, atob(b as string)]),
        )
        : source.data ?? {};
      const items: Array<{ key: string; path: string; mode?: number }> = ref.items ??
        Object.keys(data).map((key) => ({ key, path: key }));
      for (const item of items) {
        const file = `${path}/${item.path}`;
        await Deno.mkdir(file.slice(0, file.lastIndexOf("/")), { recursive: true });
        await Deno.writeTextFile(file, data[item.key] ?? "");
        await Deno.chmod(file, item.mode ?? ref.defaultMode ?? 0o644);
      }
    }
    return dir;
  }

  async #exec(c: K8sObject): Promise<{ code: number; message: string } | null> {
    const dir = this.#dir!;
    const termination = `${dir}/termination-${c.name}`;
    await Deno.writeTextFile(termination, "");
    const home = Deno.env.get("HOME") ?? "/root";
    const args = ["--die-with-parent", "--unshare-pid", "--new-session"];
    for (const d of HOST_DIRS) {
      if (await Deno.stat(d).then(() => true, () => false)) args.push("--ro-bind", d, d);
    }
    // Deno and its caches (the runner image has them); the reins checkout, read-only.
    const repo = new URL("../..", import.meta.url).pathname.replace(/\/$/, "");
    args.push("--bind", home, home);
    args.push("--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp");
    // After the private /tmp: a checkout under /tmp (CI's fresh clone) stays visible.
    args.push("--ro-bind", repo, repo);
    for (const path of this.host.imagePaths) args.push("--ro-bind", path, path);
    args.push("--bind", termination, c.terminationMessagePath ?? "/dev/termination-log");
    for (const m of c.volumeMounts ?? []) {
      const source = `${dir}/volumes/${m.name}${m.subPath ? `/${m.subPath}` : ""}`;
      args.push(m.readOnly ? "--ro-bind" : "--bind", source, m.mountPath);
    }
    if (c.workingDir) args.push("--chdir", c.workingDir);
    const env: Record<string, string> = {
      PATH: "/usr/local/bin:/usr/bin:/bin",
      HOME: home,
      DENO_DIR: Deno.env.get("DENO_DIR") ?? `${home}/.cache/deno`,
      DENO_NO_UPDATE_CHECK: "1",
      NO_COLOR: "1",
    };
    for (const e of c.env ?? []) env[e.name] = e.value ?? "";
    const argv = [...(c.command ?? []), ...(c.args ?? [])];
    if (argv.length === 0) throw new Error(`container ${c.name}: the fake needs a command`);
    const out = await new Deno.Command("bwrap", {
      args: [...args, "--", ...argv],
      env,
      clearEnv: true,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      signal: this.#abort.signal,
    }).output().catch(() => null);
    if (!out || this.#stopped) return null;
    const decode = (b: Uint8Array) => new TextDecoder().decode(b);
    this.logs.set(c.name, decode(out.stdout) + decode(out.stderr));
    const message = (await Deno.readTextFile(termination).catch(() => "")).slice(0, 4096);
    return { code: out.code, message };
  }
}
