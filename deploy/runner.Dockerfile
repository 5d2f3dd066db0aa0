# syntax=docker/dockerfile:1
# The reins harness runner: Deno, git, reins itself (for the verifier and reporter containers of
# a verified Kubernetes pod, and for the built-in and CLI harnesses), and the harness CLIs named
# by the HARNESSES build argument, installed into reins' own pinned cache.
#
#   docker build -f deploy/runner.Dockerfile -t reins-runner:0.1.0 .
#   docker build -f deploy/runner.Dockerfile --build-arg HARNESSES="codex claude_code" \
#     -t reins-runner:0.1.0-cli .
#
# Build context: the repository root (BuildKit reads runner.Dockerfile.dockerignore). Not built
# in reins' CI: the machine that wrote this has no container builder (tests/deploy_test.ts
# parses and checks it).

ARG DENO_VERSION=2.9.6
FROM denoland/deno:debian-${DENO_VERSION}

# The harness CLIs to install, by reins' names (lib/harness/cli/registry.ts):
# opencode, claude_code, codex, qwen_code. Empty: none (and no Node.js).
ARG HARNESSES=""

# git for the tasks' repositories, bubblewrap for the local sandbox, curl and ca-certificates
# for the gateway; Node.js and npm only when a harness CLI needs them.
RUN apt-get update \
 && apt-get install -y --no-install-recommends git bubblewrap curl ca-certificates python3 \
 && if [ -n "$HARNESSES" ]; then apt-get install -y --no-install-recommends nodejs npm; fi \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/reins
COPY deno.json deno.lock ./
COPY mod.ts ./
COPY bin ./bin
COPY lib ./lib
COPY scripts ./scripts
# Cache every npm dependency at build time: the pods run without registry access.
ENV DENO_DIR=/opt/deno-dir REINS_HOME=/opt/reins-home
RUN deno install --frozen \
 && deno cache lib/controller/k8s_verifier.ts lib/harness/mod.ts bin/controller.ts bin/gateway.ts

# The CLIs at the versions reins pins, where reins' harness runner looks for them.
RUN for harness in $HARNESSES; do \
      deno eval --frozen "import { ensureCli } from './lib/harness/cli/install.ts'; \
        import { cliAdapter } from './lib/harness/cli/registry.ts'; \
        const { bin } = await ensureCli(cliAdapter('$harness')); console.log(bin);" || exit 1; \
    done

# An unprivileged user; the caches stay readable (never writable: they are the image's).
RUN useradd --create-home --uid 10001 reins \
 && chmod -R a+rX /opt/reins /opt/deno-dir /opt/reins-home 2>/dev/null || true
USER 10001
ENV HOME=/home/reins
ENTRYPOINT []
CMD ["deno", "run", "-A", "/opt/reins/lib/controller/k8s_verifier.ts", "verify"]
