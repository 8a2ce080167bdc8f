module github.com/tributary/tributary/services/mqtt-bridge

go 1.26.0

replace (
	github.com/tributary/tributary/libs => ../../libs
	github.com/tributary/tributary/proto => ../../proto
)

require (
	github.com/tributary/tributary/libs v0.0.0-00010101000000-000000000000
	go.uber.org/goleak v1.3.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/kr/pretty v0.3.1 // indirect
	github.com/stretchr/testify v1.11.1 // indirect
)
