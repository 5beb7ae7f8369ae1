# The sandbox image: what the k8s provider's pod runs (control/provider/k8s
# objects.go). sbx-init is PID 1: it installs the mounted Secret at
# /etc/sbx (host_key, user_ca.pub, files.json; again when a warm claim
# replaces it), runs and supervises sshd on $SBX_SSH_PORT trusting the
# internal CA, serves the edge's forwarder on $SBX_FORWARD_PORT with the
# same keys, runs the sandbox's services, reaps orphans and ends every
# process on SIGTERM. The pod runs it as the non-root user sandbox
# (1000:1000, all capabilities dropped), with the workspace volume at
# /workspace.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/sbx-init ./cmd/sbx-init

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends openssh-server ca-certificates git curl python3 procps \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 1000 sandbox \
 && useradd --uid 1000 --gid 1000 --home-dir /home/sandbox --create-home --shell /bin/bash sandbox \
 && mkdir -p /workspace /run/sbx \
 && chown sandbox:sandbox /workspace /run/sbx
COPY --from=build /out/sbx-init /usr/local/bin/sbx-init
ENV SBX_SSH_PORT=2222 SBX_FORWARD_PORT=2223 SBX_SECRET_DIR=/etc/sbx SBX_RUN_DIR=/run/sbx SBX_WORKSPACE=/workspace HOME=/home/sandbox
USER 1000:1000
WORKDIR /workspace
VOLUME ["/workspace"]
EXPOSE 2222 2223
ENTRYPOINT ["/usr/local/bin/sbx-init"]
