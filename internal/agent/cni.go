package agent

import (
	"context"
	"encoding/json"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/tenure-ipam/tenure/internal/cniwire"
)

// Response is the outcome of one CNI call: the result to print, already
// encoded in the requested cniVersion (nil when the command prints none), or
// a CNI error.
type Response struct {
	Result json.RawMessage
	Error  *types.Error
}

// Handle runs one CNI call. It is the agent's plain Go API; the socket
// server is a thin transport over it.
func (a *Agent) Handle(ctx context.Context, req *cniwire.Request) *Response {
	var (
		res types.Result
		err error
	)
	if verr := validateCall(req); verr != nil {
		return &Response{Error: verr}
	}
	ctx = a.arrivals.withArrival(ctx)
	switch req.Command {
	case "ADD":
		res, err = a.add.run(ctx, req)
	case "DEL":
		err = a.del.run(ctx, req)
	case "CHECK":
		err = a.check.run(ctx, req)
	case "GC":
		err = a.gc.run(ctx, req)
	case "STATUS":
		err = a.status.run(ctx)
	}
	if err != nil {
		a.log.Info("cni call failed", "command", req.Command, "containerID", req.ContainerID, "ifName", req.IfName, "err", err)
		return &Response{Error: toCNI(err)}
	}
	if res == nil {
		return &Response{}
	}
	data, err := json.Marshal(res)
	if err != nil {
		return &Response{Error: toCNI(err)}
	}
	return &Response{Result: data}
}
