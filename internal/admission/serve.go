package admission

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Serve serves h at Path over TLS on l with the certificates of certs,
// until ctx ends.
func Serve(ctx context.Context, l net.Listener, h http.Handler, certs *Certs, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.Handle(Path, h)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate},
	}
	go func() {
		if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) && log != nil {
			log.Error("serving the webhook", "err", err)
		}
	}()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
}
