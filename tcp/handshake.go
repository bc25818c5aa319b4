package tcp

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// helloMagic opens a handshake ("GORUNHS1"); it also reveals the byte order,
// since a peer of the other endianness reads it differently.
const helloMagic = 0x3153484e55524f47

const (
	nonceSize = 16
	macSize   = sha256.Size
	helloSize = 8 + 4 + 4 + 4 + 4 + nonceSize
)

// ErrAuth is returned when the peer does not prove knowledge of the job token.
var ErrAuth = errors.New("authentication failed: the peer does not know this job's token")

// ErrTaken is returned to a dialer turned away because another live
// connection already holds its identity: two processes started as the
// same rank.
var ErrTaken = errors.New("another connection holds this identity (two processes started as the same rank?)")

// ErrIdentity is returned to a dialer whose announced identity the
// listener rejected: another job's size, a rank outside the job, or
// another kind of connection. Retrying the same identity cannot succeed.
var ErrIdentity = errors.New("identity rejected (wrong job, size or rank)")

// Identity is what the two ends of a connection tell each other.
type Identity struct {
	// Purpose separates connection kinds (data, store) so a proof made for one
	// cannot be replayed as another.
	Purpose uint32
	// From is the dialing rank, To the rank it wants to reach (-1: the store).
	From, To int32
	// Size is the job's world size, checked for agreement.
	Size int32
}

// Purposes of a connection, part of what the handshake authenticates.
const (
	PurposeData  uint32 = 1
	PurposeStore uint32 = 2
)

func (id Identity) encode(b []byte, nonce []byte) {
	binary.LittleEndian.PutUint64(b[0:], helloMagic)
	binary.LittleEndian.PutUint32(b[8:], id.Purpose)
	binary.LittleEndian.PutUint32(b[12:], uint32(id.From))
	binary.LittleEndian.PutUint32(b[16:], uint32(id.To))
	binary.LittleEndian.PutUint32(b[20:], uint32(id.Size))
	copy(b[24:], nonce)
}

func proof(token []byte, role byte, id Identity, first, second []byte) []byte {
	m := hmac.New(sha256.New, token)
	var b [17]byte
	b[0] = role
	binary.LittleEndian.PutUint32(b[1:], id.Purpose)
	binary.LittleEndian.PutUint32(b[5:], uint32(id.From))
	binary.LittleEndian.PutUint32(b[9:], uint32(id.To))
	binary.LittleEndian.PutUint32(b[13:], uint32(id.Size))
	m.Write(b[:])
	m.Write(first)
	m.Write(second)
	return m.Sum(nil)
}

// Within returns d, or less when ctx's deadline comes sooner (at least
// a millisecond): a handshake's timeout that does not outlast the wait it
// belongs to.
func Within(ctx context.Context, d time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		if u := time.Until(dl); u < d {
			return max(u, time.Millisecond)
		}
	}
	return d
}

// DialHandshake runs the dialing side of the handshake on a fresh connection:
// it announces id and proves, by HMAC over both sides' fresh nonces, that it
// knows token — the token itself never crosses the wire. It also checks the
// listener's proof, so both sides are authenticated. With an empty token no
// proofs are exchanged but the identities still are.
func DialHandshake(conn net.Conn, token []byte, id Identity, timeout time.Duration) error {
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	defer conn.SetDeadline(time.Time{})
	nonce := make([]byte, nonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	hello := make([]byte, helloSize)
	id.encode(hello, nonce)
	if _, err := conn.Write(hello); err != nil {
		return fmt.Errorf("handshake: send hello: %w", err)
	}
	// The listener answers with its nonce, its proof and a status byte.
	reply := make([]byte, 1+nonceSize+macSize)
	if _, err := io.ReadFull(conn, reply); err != nil {
		return fmt.Errorf("handshake: read reply (wrong token or not a gorun peer?): %w", err)
	}
	if reply[0] == refuseBadPeer {
		return fmt.Errorf("handshake: peer refused: %w", ErrIdentity)
	}
	if reply[0] != 0 {
		return fmt.Errorf("handshake: peer refused: %s", refusal(reply[0]))
	}
	theirNonce := reply[1 : 1+nonceSize]
	if len(token) > 0 && !hmac.Equal(reply[1+nonceSize:], proof(token, 'L', id, nonce, theirNonce)) {
		return ErrAuth
	}
	mine := make([]byte, macSize)
	if len(token) > 0 {
		copy(mine, proof(token, 'D', id, theirNonce, nonce))
	}
	if _, err := conn.Write(mine); err != nil {
		return fmt.Errorf("handshake: send proof: %w", err)
	}
	var ok [1]byte
	if _, err := io.ReadFull(conn, ok[:]); err != nil {
		return fmt.Errorf("handshake: read verdict: %w", err)
	}
	if ok[0] == refuseDuplicate {
		return errDuplicate
	}
	if ok[0] == refuseTaken {
		return fmt.Errorf("handshake: peer refused: %w", ErrTaken)
	}
	if ok[0] != 0 {
		return fmt.Errorf("handshake: peer refused: %s", refusal(ok[0]))
	}
	return nil
}

// errDuplicate: the listener keeps another connection between the two
// ranks (both dialed at once; the lower rank's dial wins).
var errDuplicate = errors.New("handshake: the peer keeps the connection it dialed itself")

// Refusal codes sent by the listener.
const (
	refuseNone    = 0
	refuseAuth    = 1
	refuseBadPeer = 2
	// refuseDuplicate: the dialer proved itself, but the listener keeps
	// another connection with it.
	refuseDuplicate = 3
	// refuseClosing: the listener's transport is closing.
	refuseClosing = 4
	// refuseTaken: the dialer proved itself, but another live connection
	// holds its identity (AcceptHandshakeUnless).
	refuseTaken = 5
)

func refusal(code byte) string {
	switch code {
	case refuseAuth:
		return "authentication failed (job token differs)"
	case refuseBadPeer:
		return ErrIdentity.Error()
	case refuseDuplicate:
		return "a connection between the two ranks exists"
	case refuseClosing:
		return "the peer is closing its group"
	case refuseTaken:
		return ErrTaken.Error()
	}
	return fmt.Sprintf("code %d", code)
}

// AcceptHandshake runs the listening side of the handshake. check validates
// the identity the dialer announced before any proof is computed. It returns
// that identity once the dialer has proved it knows token.
func AcceptHandshake(conn net.Conn, token []byte, check func(Identity) error, timeout time.Duration) (Identity, error) {
	return acceptHandshake(conn, token, check, nil, timeout)
}

// AcceptHandshakeUnless is AcceptHandshake that, once the dialer has
// proved itself, turns it away when taken reports its identity in use:
// the dialer's DialHandshake then fails with ErrTaken.
func AcceptHandshakeUnless(conn net.Conn, token []byte, check func(Identity) error, taken func(Identity) bool, timeout time.Duration) (Identity, error) {
	return acceptHandshake(conn, token, check, func(id Identity) byte {
		if taken(id) {
			return refuseTaken
		}
		return refuseNone
	}, timeout)
}

// acceptHandshake is AcceptHandshake with a verdict: once the dialer has
// proved itself, decide (when set) returns the code to answer (0: keep
// the connection); a connection refused that way ends with errRefused.
func acceptHandshake(conn net.Conn, token []byte, check func(Identity) error, decide func(Identity) byte, timeout time.Duration) (Identity, error) {
	var id Identity
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return id, err
	}
	defer conn.SetDeadline(time.Time{})
	// The magic first: a stranger speaking another protocol is dropped
	// on its first 8 bytes, not held until the timeout.
	hello := make([]byte, helloSize)
	if _, err := io.ReadFull(conn, hello[:8]); err != nil {
		return id, fmt.Errorf("handshake: read hello: %w", err)
	}
	if m := binary.LittleEndian.Uint64(hello); m != helloMagic {
		return id, fmt.Errorf("handshake: bad magic %#x (not a gorun peer, or other byte order)", m)
	}
	if _, err := io.ReadFull(conn, hello[8:]); err != nil {
		return id, fmt.Errorf("handshake: read hello: %w", err)
	}
	id = Identity{
		Purpose: binary.LittleEndian.Uint32(hello[8:]),
		From:    int32(binary.LittleEndian.Uint32(hello[12:])),
		To:      int32(binary.LittleEndian.Uint32(hello[16:])),
		Size:    int32(binary.LittleEndian.Uint32(hello[20:])),
	}
	theirNonce := hello[24:]
	reply := make([]byte, 1+nonceSize+macSize)
	if err := check(id); err != nil {
		reply[0] = refuseBadPeer
		conn.Write(reply)
		return id, err
	}
	nonce := reply[1 : 1+nonceSize]
	if _, err := rand.Read(nonce); err != nil {
		return id, err
	}
	if len(token) > 0 {
		copy(reply[1+nonceSize:], proof(token, 'L', id, theirNonce, nonce))
	}
	if _, err := conn.Write(reply); err != nil {
		return id, fmt.Errorf("handshake: send reply: %w", err)
	}
	theirs := make([]byte, macSize)
	if _, err := io.ReadFull(conn, theirs); err != nil {
		if errors.Is(err, io.EOF) && len(token) > 0 {
			// DialHandshake checks this side's proof first and hangs up
			// when it does not hold the same token.
			return id, fmt.Errorf("handshake: the dialer left on reading this side's proof: %w", ErrAuth)
		}
		return id, fmt.Errorf("handshake: read proof: %w", err)
	}
	if len(token) > 0 && !hmac.Equal(theirs, proof(token, 'D', id, nonce, theirNonce)) {
		conn.Write([]byte{refuseAuth})
		return id, ErrAuth
	}
	verdict := byte(refuseNone)
	if decide != nil {
		verdict = decide(id)
	}
	if _, err := conn.Write([]byte{verdict}); err != nil {
		return id, fmt.Errorf("handshake: send verdict: %w", err)
	}
	if verdict != refuseNone {
		return id, fmt.Errorf("%w: %s", errRefused, refusal(verdict))
	}
	return id, nil
}

// errRefused: this end turned the dialer away after the proofs (decide).
var errRefused = errors.New("handshake: refused")
