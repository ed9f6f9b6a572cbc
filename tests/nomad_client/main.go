// nomad_client launches gpuslice-nomad-device as a Nomad client does, with
// HashiCorp's go-plugin client (Debian 12's 1.0.1): the handshake, Nomad's
// magic cookie, gRPC, the health check, the broker's stream, and the base and
// device plugins dispensed over one connection. It then runs the commands it
// reads on stdin, one a line, answering each with one JSON line on stdout:
//
//	ping                     go-plugin's health check
//	info | schema            PluginInfo, ConfigSchema
//	setconfig JSON           SetConfig: a JSON object of strings, encoded with
//	                         go-cty's msgpack as Nomad encodes a plugin block
//	setconfig-raw HEX        SetConfig with these msgpack bytes
//	fingerprint              the next answer of the Fingerprint stream
//	reserve ID...            Reserve
//	stats                    the next answer of the Stats stream (200 ms)
//	kill                     go-plugin's Kill (the controller's Shutdown)
//
// The generated packages (gsnomad/...) are protoc's Go code of the plugin's
// own protos, made by the test that builds this (tests/test_nomad_device.py).
package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/golang/protobuf/jsonpb"
	"github.com/golang/protobuf/proto"
	"github.com/golang/protobuf/ptypes"
	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"github.com/zclconf/go-cty/cty"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	base "gsnomad/base"
	device "gsnomad/device"
)

// Nomad's plugins/base Handshake.
var handshake = plugin.HandshakeConfig{
	ProtocolVersion:  2,
	MagicCookieKey:   "NOMAD_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
}

// A go-plugin GRPCPlugin whose client side is the generated stub, as Nomad's
// plugins/base and plugins/device register theirs.
type basePlugin struct{ plugin.NetRPCUnsupportedPlugin }

func (basePlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error { return nil }
func (basePlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (interface{}, error) {
	return base.NewBasePluginClient(c), nil
}

type devicePlugin struct{ plugin.NetRPCUnsupportedPlugin }

func (devicePlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error { return nil }
func (devicePlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (interface{}, error) {
	return device.NewDevicePluginClient(c), nil
}

var marshaler = jsonpb.Marshaler{OrigName: true}

func say(v interface{}) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(b))
}

func answer(m proto.Message, err error) {
	if err != nil {
		st, _ := status.FromError(err)
		say(map[string]string{"error": st.Message(), "code": st.Code().String()})
		return
	}
	s, err := marshaler.MarshalToString(m)
	if err != nil {
		panic(err)
	}
	fmt.Println(s)
}

// A stream's answers, read as they come, handed out one per command.
type stream struct {
	msgs chan proto.Message
	errs chan error
}

func (s *stream) next() {
	select {
	case m := <-s.msgs:
		answer(m, nil)
	case err := <-s.errs:
		answer(nil, err)
	case <-time.After(30 * time.Second):
		say(map[string]string{"error": "no answer within 30 s", "code": "Timeout"})
	}
}

func ctyConfig(doc map[string]string) ([]byte, error) {
	names := make([]string, 0, len(doc))
	for k := range doc {
		names = append(names, k)
	}
	sort.Strings(names)
	vals, types := map[string]cty.Value{}, map[string]cty.Type{}
	for _, k := range names {
		vals[k], types[k] = cty.StringVal(doc[k]), cty.String
	}
	return ctymsgpack.Marshal(cty.ObjectVal(vals), cty.Object(types))
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: nomad_client PLUGIN_COMMAND")
		os.Exit(2)
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  handshake,
		Plugins:          map[string]plugin.Plugin{"base": basePlugin{}, "device": devicePlugin{}},
		Cmd:              exec.Command(os.Args[1]),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.New(&hclog.LoggerOptions{Name: "nomad_client", Output: os.Stderr, Level: hclog.Debug}),
	})
	defer client.Kill()
	rpc, err := client.Client()
	if err != nil {
		say(map[string]string{"error": err.Error(), "code": "Handshake"})
		os.Exit(1)
	}
	raw, err := rpc.Dispense("base")
	if err != nil {
		panic(err)
	}
	bp := raw.(base.BasePluginClient)
	raw, err = rpc.Dispense("device")
	if err != nil {
		panic(err)
	}
	dp := raw.(device.DevicePluginClient)
	say(map[string]interface{}{"started": true, "protocol": client.Protocol(), "version": client.NegotiatedVersion()})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var fp, st *stream
	in := bufio.NewScanner(os.Stdin)
	// Lines of megabytes: the plugin must answer a huge value with a bounded error.
	in.Buffer(make([]byte, 64*1024), 16<<20)
	for in.Scan() {
		verb, arg := in.Text(), ""
		if i := strings.IndexByte(verb, ' '); i >= 0 {
			verb, arg = verb[:i], verb[i+1:]
		}
		switch verb {
		case "ping":
			if err := rpc.Ping(); err != nil {
				say(map[string]string{"error": err.Error(), "code": "Ping"})
			} else {
				say(map[string]bool{"serving": true})
			}
		case "info":
			answer(bp.PluginInfo(ctx, &base.PluginInfoRequest{}))
		case "schema":
			answer(bp.ConfigSchema(ctx, &base.ConfigSchemaRequest{}))
		case "setconfig", "setconfig-raw":
			var b []byte
			if verb == "setconfig" {
				doc := map[string]string{}
				if err = json.Unmarshal([]byte(arg), &doc); err == nil {
					b, err = ctyConfig(doc)
				}
			} else {
				b, err = hex.DecodeString(arg)
			}
			if err != nil {
				panic(err)
			}
			answer(bp.SetConfig(ctx, &base.SetConfigRequest{MsgpackConfig: b, PluginApiVersion: "v0.1.0"}))
		case "fingerprint":
			if fp == nil {
				c, err := dp.Fingerprint(ctx, &device.FingerprintRequest{})
				if err != nil {
					answer(nil, err)
					continue
				}
				fp = &stream{make(chan proto.Message, 64), make(chan error, 1)}
				go func() {
					for {
						m, err := c.Recv()
						if err != nil {
							fp.errs <- err
							return
						}
						fp.msgs <- m
					}
				}()
			}
			fp.next()
		case "reserve":
			answer(dp.Reserve(ctx, &device.ReserveRequest{DeviceIds: strings.Fields(arg)}))
		case "stats":
			if st == nil {
				c, err := dp.Stats(ctx, &device.StatsRequest{CollectionInterval: ptypes.DurationProto(200 * time.Millisecond)})
				if err != nil {
					answer(nil, err)
					continue
				}
				st = &stream{make(chan proto.Message, 1), make(chan error, 1)}
				go func() {
					for {
						m, err := c.Recv()
						if err != nil {
							st.errs <- err
							return
						}
						select { // keep the newest: drop what nobody asked for
						case st.msgs <- m:
						default:
							<-st.msgs
							st.msgs <- m
						}
					}
				}()
			}
			st.next()
		case "kill":
			cancel()
			client.Kill()
			say(map[string]bool{"exited": client.Exited()})
			return
		default:
			fmt.Fprintf(os.Stderr, "nomad_client: unknown command %q\n", verb)
			os.Exit(2)
		}
	}
}
