# The control image: the control binary on a distroless base. SQLite is
# the pure-Go driver, so the binary is static.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/control ./cmd/control

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/control /usr/local/bin/control
USER 65532:65532
EXPOSE 8080 8081 9091
ENTRYPOINT ["/usr/local/bin/control"]
