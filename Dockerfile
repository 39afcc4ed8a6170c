# syntax=docker/dockerfile:1
#
# skillbox as a container: the host, the bundled skills' components, and
# their code compiled ahead of time. Runs as a non-root user on a
# read-only root filesystem; docs/deploy.md shows how.
#
#   docker build -t skillbox:0.1.0 .
#   docker run --rm --read-only --tmpfs /tmp -p 8080:8080 \
#     -v "$PWD/token:/run/secrets/skillbox/token:ro" skillbox:0.1.0

# ---- build: the host and the guest components ----------------------------
FROM rust:1.95-bookworm AS build
RUN rustup target add wasm32-wasip2
WORKDIR /src
COPY . .
# The components land in skills/*/tools and skills/*/scripts.
RUN scripts/build-guests \
 && cargo build --release --locked -p skillbox --bin skillbox

# ---- runtime ----------------------------------------------------------------
FROM debian:bookworm-slim AS runtime
# git: skills added from git references, and the agent Job's checkout
# (deploy/kubernetes/agent-job.yaml).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates git \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 skillbox \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin skillbox \
 && install -d -o 10001 -g 10001 -m 0700 /opt/skillbox/cache \
 && install -d -m 0755 /workspace /skills
COPY --from=build /src/target/release/skillbox /usr/local/bin/skillbox
COPY --from=build --chown=10001:10001 /src/skills /opt/skillbox/skills

USER 10001:10001
# Nothing is read from a home folder: skills, cache and audit log are named.
ENV HOME=/nonexistent \
    SKILLBOX_SYSTEM_SKILLS=/opt/skillbox/skills \
    SKILLBOX_STATE_DIR=/tmp/skillbox-state

# Compile every bundled component now, as the user that serves, so the
# cache is owned by it (the host loads native code only from a folder its
# own user owns) and a new replica is ready without compiling. The cache
# holds code for this build machine's CPU: on a node whose CPU differs, a
# replica compiles in memory and /readyz says so.
RUN skillbox compile --cache /opt/skillbox/cache

# The files the tools may read are mounted at /workspace (read-only: the
# command serves only tools declared `read`). Other skills go at /skills
# (add `--skills /skills`), with a cache filled for them by
# `skillbox compile /skills --cache DIR`.
VOLUME ["/workspace", "/skills"]
EXPOSE 8080
STOPSIGNAL SIGTERM
ENTRYPOINT ["skillbox"]
CMD ["serve", "--http", "0.0.0.0:8080", \
     "--auth-token-file", "/run/secrets/skillbox/token", \
     "--cache", "/opt/skillbox/cache", \
     "--workspace", "/workspace", "--read-only", \
     "--audit", "/dev/stdout", \
     "--shutdown-grace", "25"]
