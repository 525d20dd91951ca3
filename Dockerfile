# Build a static binary (pure-Go SQLite, no cgo), then ship it alone.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/atfeeds/appview/appview.Version=${VERSION}" \
    -o /out/appview ./cmd/appview
RUN mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/appview /usr/local/bin/appview
COPY config.example.yaml /etc/appview/config.example.yaml
COPY --from=build --chown=65532:65532 /out/data /data
# The database lives on the volume; the default config writes ./appview.db
# relative to the working directory.
WORKDIR /data
VOLUME /data
EXPOSE 8080
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/appview"]
CMD ["serve"]
