package rdma

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestLayoutMatchesHeader compiles a C program against <infiniband/verbs.h>
// that prints the sizes and offsets this binding relies on, and compares
// them with the Go structures and constants. It needs a C compiler and the
// header (Debian: gcc, libibverbs-dev; CI installs both).
func TestLayoutMatchesHeader(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) to read <infiniband/verbs.h> with")
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("no /usr/include/infiniband/verbs.h (Debian: apt-get install libibverbs-dev)")
	}
	var sendWR ibvSendWR
	var wc ibvWC
	var qpAttr ibvQPAttr
	var ah ibvAHAttr
	want := []struct {
		c   string
		go_ uintptr
	}{
		{"offsetof(struct ibv_context, ops)", ctxOps},
		{"offsetof(struct ibv_context_ops, poll_cq)", opsPollCQ},
		{"offsetof(struct ibv_context_ops, post_send)", opsPostSend},
		{"offsetof(struct ibv_context_ops, post_recv)", opsPostRecv},
		{"offsetof(struct ibv_qp, qp_num)", qpNum},
		{"offsetof(struct ibv_mr, lkey)", mrLKey},
		{"offsetof(struct ibv_mr, rkey)", mrRKey},
		{"sizeof(struct ibv_port_attr) <= 64", 1},
		{"offsetof(struct ibv_port_attr, state)", portState},
		{"offsetof(struct ibv_port_attr, active_mtu)", portActiveMTU},
		{"offsetof(struct ibv_port_attr, lid)", portLID},
		{"offsetof(struct ibv_port_attr, link_layer)", portLinkLayer},
		{"sizeof(struct ibv_qp_init_attr)", unsafe.Sizeof(ibvQPInitAttr{})},
		{"offsetof(struct ibv_qp_init_attr, cap)", unsafe.Offsetof(ibvQPInitAttr{}.Cap)},
		{"offsetof(struct ibv_qp_init_attr, qp_type)", unsafe.Offsetof(ibvQPInitAttr{}.QPType)},
		{"offsetof(struct ibv_qp_init_attr, sq_sig_all)", unsafe.Offsetof(ibvQPInitAttr{}.SQSigAll)},
		{"sizeof(struct ibv_qp_cap)", unsafe.Sizeof(ibvQPCap{})},
		{"sizeof(struct ibv_qp_attr)", unsafe.Sizeof(qpAttr)},
		{"offsetof(struct ibv_qp_attr, path_mtu)", unsafe.Offsetof(qpAttr.PathMTU)},
		{"offsetof(struct ibv_qp_attr, rq_psn)", unsafe.Offsetof(qpAttr.RQPSN)},
		{"offsetof(struct ibv_qp_attr, sq_psn)", unsafe.Offsetof(qpAttr.SQPSN)},
		{"offsetof(struct ibv_qp_attr, dest_qp_num)", unsafe.Offsetof(qpAttr.DestQPNum)},
		{"offsetof(struct ibv_qp_attr, qp_access_flags)", unsafe.Offsetof(qpAttr.QPAccessFlags)},
		{"offsetof(struct ibv_qp_attr, cap)", unsafe.Offsetof(qpAttr.Cap)},
		{"offsetof(struct ibv_qp_attr, ah_attr)", unsafe.Offsetof(qpAttr.AHAttr)},
		{"offsetof(struct ibv_qp_attr, alt_ah_attr)", unsafe.Offsetof(qpAttr.AltAHAttr)},
		{"offsetof(struct ibv_qp_attr, pkey_index)", unsafe.Offsetof(qpAttr.PKeyIndex)},
		{"offsetof(struct ibv_qp_attr, max_rd_atomic)", unsafe.Offsetof(qpAttr.MaxRDAtomic)},
		{"offsetof(struct ibv_qp_attr, max_dest_rd_atomic)", unsafe.Offsetof(qpAttr.MaxDestRDAtomic)},
		{"offsetof(struct ibv_qp_attr, min_rnr_timer)", unsafe.Offsetof(qpAttr.MinRNRTimer)},
		{"offsetof(struct ibv_qp_attr, port_num)", unsafe.Offsetof(qpAttr.PortNum)},
		{"offsetof(struct ibv_qp_attr, timeout)", unsafe.Offsetof(qpAttr.Timeout)},
		{"offsetof(struct ibv_qp_attr, retry_cnt)", unsafe.Offsetof(qpAttr.RetryCnt)},
		{"offsetof(struct ibv_qp_attr, rnr_retry)", unsafe.Offsetof(qpAttr.RNRRetry)},
		{"offsetof(struct ibv_qp_attr, rate_limit)", unsafe.Offsetof(qpAttr.RateLimit)},
		{"sizeof(struct ibv_ah_attr)", unsafe.Sizeof(ah)},
		{"offsetof(struct ibv_ah_attr, dlid)", unsafe.Offsetof(ah.DLID)},
		{"offsetof(struct ibv_ah_attr, is_global)", unsafe.Offsetof(ah.IsGlobal)},
		{"offsetof(struct ibv_ah_attr, port_num)", unsafe.Offsetof(ah.Port)},
		{"sizeof(struct ibv_global_route)", unsafe.Sizeof(ibvGlobalRoute{})},
		{"offsetof(struct ibv_global_route, sgid_index)", unsafe.Offsetof(ibvGlobalRoute{}.SGIDIndex)},
		{"offsetof(struct ibv_global_route, hop_limit)", unsafe.Offsetof(ibvGlobalRoute{}.HopLimit)},
		{"sizeof(struct ibv_sge)", unsafe.Sizeof(ibvSGE{})},
		{"sizeof(struct ibv_send_wr)", unsafe.Sizeof(sendWR)},
		{"offsetof(struct ibv_send_wr, sg_list)", unsafe.Offsetof(sendWR.SGList)},
		{"offsetof(struct ibv_send_wr, num_sge)", unsafe.Offsetof(sendWR.NumSGE)},
		{"offsetof(struct ibv_send_wr, opcode)", unsafe.Offsetof(sendWR.Opcode)},
		{"offsetof(struct ibv_send_wr, send_flags)", unsafe.Offsetof(sendWR.SendFlags)},
		{"offsetof(struct ibv_send_wr, imm_data)", unsafe.Offsetof(sendWR.ImmData)},
		{"offsetof(struct ibv_send_wr, wr.rdma.remote_addr)", unsafe.Offsetof(sendWR.RemoteAddr)},
		{"offsetof(struct ibv_send_wr, wr.rdma.rkey)", unsafe.Offsetof(sendWR.RKey)},
		{"sizeof(struct ibv_recv_wr)", unsafe.Sizeof(ibvRecvWR{})},
		{"offsetof(struct ibv_recv_wr, num_sge)", unsafe.Offsetof(ibvRecvWR{}.NumSGE)},
		{"sizeof(struct ibv_wc)", unsafe.Sizeof(wc)},
		{"offsetof(struct ibv_wc, status)", unsafe.Offsetof(wc.Status)},
		{"offsetof(struct ibv_wc, byte_len)", unsafe.Offsetof(wc.ByteLen)},
		{"offsetof(struct ibv_wc, imm_data)", unsafe.Offsetof(wc.ImmData)},
		{"offsetof(struct ibv_wc, qp_num)", unsafe.Offsetof(wc.QPNum)},
		{"offsetof(struct ibv_wc, wc_flags)", unsafe.Offsetof(wc.WCFlags)},
		{"IBV_QPT_RC", qptRC},
		{"IBV_WR_RDMA_WRITE", wrRDMAWrite},
		{"IBV_WR_RDMA_WRITE_WITH_IMM", wrRDMAWriteImm},
		{"IBV_SEND_SIGNALED", sendSignaled},
		{"IBV_ACCESS_LOCAL_WRITE", accessLocalWrite},
		{"IBV_ACCESS_REMOTE_WRITE", accessRemoteWrit},
		{"IBV_PORT_ACTIVE", portStateActive},
		{"IBV_LINK_LAYER_INFINIBAND", LinkInfiniBand},
		{"IBV_LINK_LAYER_ETHERNET", LinkEthernet},
		{"IBV_QPS_INIT", qpsInit}, {"IBV_QPS_RTR", qpsRTR}, {"IBV_QPS_RTS", qpsRTS},
		{"IBV_QP_STATE", maskState}, {"IBV_QP_ACCESS_FLAGS", maskAccess}, {"IBV_QP_PKEY_INDEX", maskPKey},
		{"IBV_QP_PORT", maskPort}, {"IBV_QP_AV", maskAV}, {"IBV_QP_PATH_MTU", maskPathMTU},
		{"IBV_QP_TIMEOUT", maskTimeout}, {"IBV_QP_RETRY_CNT", maskRetry}, {"IBV_QP_RNR_RETRY", maskRNRRetry},
		{"IBV_QP_RQ_PSN", maskRQPSN}, {"IBV_QP_MAX_QP_RD_ATOMIC", maskMaxQPRDAtomic},
		{"IBV_QP_MIN_RNR_TIMER", maskMinRNRTimer}, {"IBV_QP_SQ_PSN", maskSQPSN},
		{"IBV_QP_MAX_DEST_RD_ATOMIC", maskMaxDestRDAtomic}, {"IBV_QP_DEST_QPN", maskDestQPN},
		{"IBV_WC_SUCCESS", uintptr(StatusSuccess)}, {"IBV_WC_WR_FLUSH_ERR", uintptr(StatusFlushed)},
		{"IBV_WC_REM_ACCESS_ERR", uintptr(StatusRemoteAccess)}, {"IBV_WC_RETRY_EXC_ERR", uintptr(StatusRetryExc)},
		{"IBV_WC_RNR_RETRY_EXC_ERR", uintptr(StatusRNRRetryExc)}, {"IBV_WC_GENERAL_ERR + 1", uintptr(len(statusNames))},
	}
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\nint main(void) {\n")
	for _, w := range want {
		src.WriteString("\tprintf(\"%lu\\n\", (unsigned long)(" + w.c + "));\n")
	}
	src.WriteString("\treturn 0;\n}\n")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "layout.c"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "layout")
	if out, err := exec.Command(cc, "-o", bin, filepath.Join(dir, "layout.c")).CombinedOutput(); err != nil {
		t.Fatalf("compiling against verbs.h: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for i := 0; sc.Scan(); i++ {
		got, err := strconv.ParseUint(sc.Text(), 10, 64)
		if err != nil || i >= len(want) {
			t.Fatalf("line %d of the C program's output: %q", i, sc.Text())
		}
		if uintptr(got) != want[i].go_ {
			t.Errorf("%s: the header says %d, this binding uses %d", want[i].c, got, want[i].go_)
		}
	}
}

// TestOpenWithoutDevice: on a machine with no RDMA device (CI, this
// project's machines) Open fails with ErrNoDevice and says why, whether
// libibverbs is installed or not.
func TestOpenWithoutDevice(t *testing.T) {
	if entries, _ := os.ReadDir("/sys/class/infiniband"); len(entries) > 0 {
		t.Skip("this machine has RDMA devices; bench/rdma.sh tests them")
	}
	d, err := Open(OpenConfig{})
	if err == nil {
		d.Close()
		t.Fatal("Open succeeded without a device")
	}
	if !errors.Is(err, ErrNoDevice) || !(strings.Contains(err.Error(), "libibverbs.so.1 cannot be loaded") || strings.Contains(err.Error(), "libibverbs found no RDMA device")) {
		t.Fatalf("got %v, want ErrNoDevice saying why", err)
	}
	t.Logf("Open: %v", err)
}
