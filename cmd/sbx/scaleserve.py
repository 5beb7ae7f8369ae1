# The HTTP server sbx scaletest starts in each sandbox (python3, standard
# library only): GET / serves the directory (a three-byte index.html), GET /ws
# is a WebSocket that echoes each message (as little of RFC 6455 as an echo
# needs). It prints the port it chose.
import base64, hashlib, http.server, struct
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args):
        pass
    def do_GET(self):
        if self.path != "/ws" or self.headers.get("Upgrade", "").lower() != "websocket":
            return super().do_GET()
        key = self.headers.get("Sec-WebSocket-Key", "").encode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", base64.b64encode(hashlib.sha1(key + GUID).digest()).decode())
        self.end_headers()
        self.close_connection = True
        r, w = self.rfile, self.wfile
        while True:
            h = r.read(2)
            if len(h) < 2:
                return
            op, n = h[0] & 15, h[1] & 127
            if n == 126:
                n = struct.unpack(">H", r.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", r.read(8))[0]
            mask = r.read(4) if h[1] & 128 else bytes(4)
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
            if op == 8:
                w.write(bytes([0x88, 0]))
                return
            if op == 10:
                continue
            if op == 9:
                op = 10
            size = bytes([n]) if n < 126 else struct.pack(">BH", 126, n) if n < 65536 else struct.pack(">BQ", 127, n)
            w.write(bytes([128 | op]) + size + data)
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("port", server.server_address[1], flush=True)
server.serve_forever()
