# The edge image: the edge binary alone on a distroless base. Control's
# dependencies (pgx, River, SQLite, client-go) are not linked into it
# (cmd/edge's deps_test.go checks) and nothing else is copied in.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/edge ./cmd/edge

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/edge /usr/local/bin/edge
USER 65532:65532
EXPOSE 2222 8443 8080 9090 9092
ENTRYPOINT ["/usr/local/bin/edge"]
