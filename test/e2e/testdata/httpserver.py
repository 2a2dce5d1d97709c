"""A python3 HTTP/1.1 server for the socket tests: httpserver.py LOG PORT.

ThreadingHTTPServer: a thread per connection, keep-alive. GET /N answers
"N <hits>" where hits counts the requests the server has answered.
"""
import http.server, os, sys, threading

log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
hits = 0
lock = threading.Lock()

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        global hits
        with lock:
            hits += 1
            n = hits
        body = b"%s %d\n" % (self.path[1:].encode(), n)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Handler)
os.write(log, b"start pid=%d\n" % os.getpid())
srv.serve_forever()
