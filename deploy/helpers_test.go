package deploy

import (
	"bufio"
	"bytes"

	"github.com/compose-spec/compose-go/v2/types"
)

type composePort = types.ServicePortConfig

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }
