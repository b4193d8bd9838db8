// Package firewalld puts addresses into firewalld's zones over D-Bus, the
// way the reference firewall plugin's firewalld backend does: a source
// address bound to a zone gets that zone's treatment (trusted: everything
// accepted) in firewalld's own nftables tables.
//
// It lives under netops because it changes the node's packet filter, with
// netops' contract: Add* leaves the state as asked and succeeds when it
// already is, Remove* succeeds when the address is already gone. It is its
// own package so that it is the one importer of github.com/godbus/dbus/v5,
// and netops, which every role links, stays without it. The package does no
// work at init time; [Connect] dials the system bus
// (DBUS_SYSTEM_BUS_ADDRESS, else /run/dbus/system_bus_socket).
package firewalld

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/godbus/dbus/v5"
)

// D-Bus names of firewalld and of the bus itself.
const (
	busName      = "org.freedesktop.DBus"
	name         = "org.fedoraproject.FirewallD1"
	path         = "/org/fedoraproject/FirewallD1"
	zoneIface    = name + ".zone"
	errException = name + ".Exception"
)

// Errors callers match with errors.Is.
var (
	// ErrNotRunning: the system bus is not reachable, or firewalld does not
	// own its name on it.
	ErrNotRunning = errors.New("firewalld is not running")
	// ErrInvalidZone: firewalld has no zone of that name.
	ErrInvalidZone = errors.New("firewalld has no such zone")
	// ErrZoneConflict: the address is bound to another zone already.
	ErrZoneConflict = errors.New("address is bound to another firewalld zone")
)

// Client is a connection to the system bus, for calls to firewalld.
type Client struct {
	conn *dbus.Conn
}

// Connect dials the system bus. An unreachable bus wraps [ErrNotRunning]:
// no bus, no firewalld.
func Connect(ctx context.Context) (*Client, error) {
	conn, err := dbus.ConnectSystemBus(dbus.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("connect to the system D-Bus: %w: %w", ErrNotRunning, err)
	}
	return &Client{conn: conn}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Running reports whether firewalld owns its name on the bus (as the
// reference checks; asking the owner does not start firewalld by bus
// activation).
func (c *Client) Running(ctx context.Context) bool {
	var owner string
	err := c.conn.BusObject().CallWithContext(ctx, busName+".GetNameOwner", 0, name).Store(&owner)
	return err == nil && owner != ""
}

// AddSource binds the address (as a host prefix, a.b.c.d/32 or x::y/128)
// to zone. Already bound to zone is fine; bound to another zone wraps
// [ErrZoneConflict], an unknown zone [ErrInvalidZone].
func (c *Client) AddSource(ctx context.Context, zone string, a netip.Addr) error {
	src := source(a)
	var z string
	err := c.call(ctx, "addSource", zone, src).Store(&z)
	if code(err) == "ZONE_ALREADY_SET" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("firewalld: add source %s to zone %q: %w", src, zone, wrap(err))
	}
	return nil
}

// RemoveSource unbinds the address from zone. An address bound to no zone,
// or to another zone (not ours to remove), or a zone that is gone, is fine.
func (c *Client) RemoveSource(ctx context.Context, zone string, a netip.Addr) error {
	src := source(a)
	var z string
	err := c.call(ctx, "removeSource", zone, src).Store(&z)
	switch code(err) {
	case "UNKNOWN_SOURCE", "ZONE_CONFLICT", "INVALID_ZONE":
		return nil
	}
	if err != nil {
		return fmt.Errorf("firewalld: remove source %s from zone %q: %w", src, zone, wrap(err))
	}
	return nil
}

// ZoneOfSource returns the zone the address is bound to, "" for none.
func (c *Client) ZoneOfSource(ctx context.Context, a netip.Addr) (string, error) {
	src := source(a)
	var z string
	if err := c.call(ctx, "getZoneOfSource", src).Store(&z); err != nil {
		return "", fmt.Errorf("firewalld: zone of source %s: %w", src, wrap(err))
	}
	return z, nil
}

// call calls a method of firewalld's zone interface. It never starts
// firewalld by bus activation: a stopped firewalld answers ErrNotRunning.
func (c *Client) call(ctx context.Context, method string, args ...any) *dbus.Call {
	return c.conn.Object(name, path).CallWithContext(ctx, zoneIface+"."+method, dbus.FlagNoAutoStart, args...)
}

// source is how firewalld writes a single address as a source.
func source(a netip.Addr) string {
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()).String()
}

// asDBus returns the D-Bus error in err's chain (a reply's error is a
// dbus.Error value, one the library makes a *dbus.Error).
func asDBus(err error) (dbus.Error, bool) {
	var v dbus.Error
	if errors.As(err, &v) {
		return v, true
	}
	var p *dbus.Error
	if errors.As(err, &p) && p != nil {
		return *p, true
	}
	return dbus.Error{}, false
}

// code returns firewalld's error code (INVALID_ZONE, ZONE_CONFLICT, ...):
// the word its exceptions' message starts with. "" for other errors.
func code(err error) string {
	de, ok := asDBus(err)
	if !ok || de.Name != errException || len(de.Body) == 0 {
		return ""
	}
	msg, _ := de.Body[0].(string)
	c, _, _ := strings.Cut(msg, ":")
	return strings.TrimSpace(c)
}

// wrap adds the package's sentinel errors to a D-Bus error.
func wrap(err error) error {
	if de, ok := asDBus(err); ok && (de.Name == "org.freedesktop.DBus.Error.ServiceUnknown" || de.Name == "org.freedesktop.DBus.Error.NameHasNoOwner") {
		return fmt.Errorf("%w: %w", ErrNotRunning, err)
	}
	switch code(err) {
	case "INVALID_ZONE":
		return fmt.Errorf("%w: %w", ErrInvalidZone, err)
	case "ZONE_CONFLICT":
		return fmt.Errorf("%w: %w", ErrZoneConflict, err)
	}
	return err
}
