# Build a static binary (pure-Go SQLite, no cgo), then ship it alone.
#
#   docker build --build-arg VERSION=v0.1.0 --build-arg COMMIT=$(git rev-parse HEAD) -t appview .
#   docker run -p 8080:8080 -v appview-data:/data appview
#
# The e2e tests (go test -tags e2e ./e2e) build the binary with the exact
# `go build` command below and run it as this image would: keep it on one
# RUN instruction.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# Empty: the commit Go stamps from the checkout's .git, when present.
ARG COMMIT=
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/atfeeds/appview/appview.Version=${VERSION} -X github.com/atfeeds/appview/appview.Commit=${COMMIT}" \
    -o /out/appview ./cmd/appview
RUN mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/appview /usr/local/bin/appview
# A documented starting point; mount your own config at
# /etc/appview/config.yaml and run `serve --config /etc/appview/config.yaml`,
# or set scalar keys with APPVIEW_ variables (APPVIEW_JETSTREAM_URLS, …).
COPY config.example.yaml /etc/appview/config.example.yaml
COPY --from=build --chown=65532:65532 /out/data /data
# The database lives on the volume: the default database.path is
# ./appview.db, relative to this working directory.
WORKDIR /data
VOLUME /data
# http.listen defaults to :8080 (APPVIEW_HTTP_LISTEN changes it; the health
# check reads the same variable). /xrpc/_health is liveness, /readyz is
# readiness, /metrics is Prometheus. http.admin_listen
# (APPVIEW_HTTP_ADMIN_LISTEN, e.g. :9090) moves /metrics and /status to a
# second port; publish it only where your monitoring reaches.
EXPOSE 8080
USER nonroot:nonroot
# The image has no shell or curl: the binary probes itself.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/appview", "health"]
ENTRYPOINT ["/usr/local/bin/appview"]
CMD ["serve"]
